// The daemon's wiring of the optional cold tier (gpucachefs only; the gpucache_fs library never
// includes cold/). Builds the S3 client and the ColdTier from [cold] and the environment,
// registers the "cold." control extension and the commit observer, runs the tier's background
// thread once the mount is up, and re-reads credentials and the seal keyring on a reload
// (fs/reload.h: SIGHUP; key rotation without a restart).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cold/keyring.h"
#include "cold/s3_client.h"
#include "cold/tier.h"
#include "daemon/cold_upload_log.h"
#include "fs/config.h"
#include "fs/filesystem.h"

namespace gpucache {

class DaemonCold {
 public:
  // nullptr (and *error says why, naming the key or variable) when the options are unusable.
  // Makes no request: an unreachable object store must not stop the hot tier from mounting.
  static std::unique_ptr<DaemonCold> Create(const cold::ColdOptions& config, BlockStore& store,
                                            std::string* error);
  // What Create checks of the options, the environment and the credentials file, without a
  // store: start-up and --check-config refuse a bad [cold] before touching any data directory.
  static std::optional<cold::S3Options> CheckOptions(const cold::ColdOptions& config,
                                                      std::string* error);
  ~DaemonCold();

  // Before the mount serves: the control extension and the commit observer.
  void Wire(Filesystem& fs, BlockStore& store);
  // After the mount is up (and after detaching: threads do not survive fork).
  void Start();
  std::string Metrics() const;
  // The reload hook (fs/reload.h): reads the credentials again (file, then environment) and
  // the seal keyring, and says why either is unusable (then nothing changes); ApplyCredentials
  // hands what it read to the S3 client and the sealer.
  std::string CheckCredentials();
  void ApplyCredentials();

 private:
  DaemonCold() = default;

  cold::S3Options s3_;
  std::unique_ptr<cold::S3Client> client_;
  std::string keyring_file_;
  std::shared_ptr<cold::SealKeys> keys_;
  // The tier's background drains, as log lines: declared before the tier, whose thread uses it.
  ColdUploadLog upload_log_;
  std::unique_ptr<cold::ColdTier> tier_;
  // Read by CheckCredentials on the reload thread, applied by ApplyCredentials.
  std::optional<cold::S3Options> checked_;
  std::shared_ptr<const cold::Keyring> checked_keyring_;
};

}  // namespace gpucache
