// The daemon's wiring of the optional cold tier (gpucachefs only; the gpucache_fs library never
// includes cold/). Builds the S3 client and the ColdTier from [cold] and the environment,
// registers the "cold." control extension and the commit observer, runs the tier's background
// thread once the mount is up, and re-reads credentials on SIGHUP (key rotation without a
// restart).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cold/s3_client.h"
#include "cold/tier.h"
#include "fs/config.h"
#include "fs/filesystem.h"

namespace gpucache {

class DaemonCold {
 public:
  // nullptr (and *error says why, naming the key or variable) when the options are unusable.
  // Makes no request: an unreachable object store must not stop the hot tier from mounting.
  static std::unique_ptr<DaemonCold> Create(const ColdConfig& config, BlockStore& store,
                                            std::string* error);
  // What Create checks of the options, the environment and the credentials file, without a
  // store: start-up and --check-config refuse a bad [cold] before touching any data directory.
  static std::optional<cold::S3Options> CheckOptions(const ColdConfig& config, std::string* error);
  ~DaemonCold();

  // Before the mount serves: the control extension and the commit observer.
  void Wire(Filesystem& fs, BlockStore& store);
  // After the mount is up (and after detaching: threads do not survive fork).
  void Start();
  std::string Metrics() const;

 private:
  DaemonCold() = default;
  void WatchReload();

  cold::S3Options s3_;
  std::unique_ptr<cold::S3Client> client_;
  std::unique_ptr<cold::ColdTier> tier_;
  std::atomic<bool> stop_{false};
  std::thread reload_;
};

}  // namespace gpucache
