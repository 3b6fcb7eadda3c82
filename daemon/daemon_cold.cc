#include "daemon/daemon_cold.h"

#include <spdlog/spdlog.h>

#include "cold/control.h"

namespace gpucache {

std::optional<cold::S3Options> DaemonCold::CheckOptions(const cold::ColdOptions& c,
                                                        std::string* error) {
  cold::S3Options s3 = c.s3;
  cold::ApplyEnvironment(s3);
  if (std::string e = cold::LoadCredentialsFile(s3); !e.empty()) {
    *error = "[cold] " + e;
    return std::nullopt;
  }
  if (std::string e = cold::Validate(s3); !e.empty()) {
    *error = "[cold] " + e + " (configuration or GPUCACHE_S3_* environment)";
    return std::nullopt;
  }
  std::string why;
  if (!cold::Keyring::Load(c.keyring_file, &why)) {
    *error = "[cold] keyring_file " + why;
    return std::nullopt;
  }
  return s3;
}

std::unique_ptr<DaemonCold> DaemonCold::Create(const cold::ColdOptions& c, BlockStore& store,
                                               std::string* error) {
  std::optional<cold::S3Options> options = CheckOptions(c, error);
  if (!options) return nullptr;
  std::unique_ptr<DaemonCold> d(new DaemonCold());
  cold::S3Options& s3 = d->s3_;
  s3 = std::move(*options);
  auto client = cold::S3Client::Create(s3);
  if (!client.ok()) {
    *error = "[cold] " + client.error().message;
    return nullptr;
  }
  d->client_ = std::move(client.value());
  std::string why;
  auto keyring = cold::Keyring::Load(c.keyring_file, &why);
  if (!keyring) {
    *error = "[cold] keyring_file " + why;
    return nullptr;
  }
  d->keyring_file_ = c.keyring_file;
  d->keys_ = std::make_shared<cold::SealKeys>(keyring);
  d->tier_ = std::make_unique<cold::ColdTier>(store, *d->client_, c.tier, d->keys_);
  // Nothing waits on S3 once the daemon stops: a stalled transfer would hold the stop past
  // systemd's TimeoutStopSec (30 s), and the hot store writes its INDEX only after the tier.
  cold::S3Client* s3_client = d->client_.get();
  d->tier_->SetStopHook([s3_client] { s3_client->AbortTransfers(); });
  ColdUploadLog* upload_log = &d->upload_log_;
  d->tier_->SetDrainedHook([upload_log](const cold::DrainReport& r) { upload_log->Note(r); });
  spdlog::info("cold tier: {} bucket {} prefix '{}', write-back {}, sealing with key {}",
               s3.endpoint, s3.bucket, c.tier.prefix, cold::ToString(c.tier.write_back),
               keyring->current());
  return d;
}

DaemonCold::~DaemonCold() {
  if (tier_) tier_->Stop();  // aborts the S3 transfers in flight (the stop hook set in Create)
}

void DaemonCold::Wire(Filesystem& fs, BlockStore& store) {
  cold::ColdTier* tier = tier_.get();
  store.SetCommitObserver([tier](const BlockAddress& a) { tier->OnCommitted(a); });
  store.SetInvalidationObserver(
      [tier](const BlockAddress& a, const std::string& checksum) { tier->OnInvalidated(a, checksum); });
  tier->SetRefilledHook([&fs](const BlockAddress& a) { fs.BlockAppeared(a); });
  fs.control().AddExtension("cold.", [tier](const Principal& who, std::string_view req) {
    return cold::HandleColdRequest(*tier, who, req);
  });
}

void DaemonCold::Start() { tier_->Start(); }

std::string DaemonCold::CheckCredentials() {
  cold::S3Options fresh = s3_;
  cold::ApplyEnvironment(fresh);
  if (std::string e = cold::LoadCredentialsFile(fresh); !e.empty()) {
    return "cold tier credentials: " + e;
  }
  if (fresh.access_key.empty() || fresh.secret_key.empty()) {
    return "cold tier credentials: empty access or secret key";
  }
  // A bad keyring keeps the one in use: sealing must never stop or fall back.
  std::string why;
  auto keyring = cold::Keyring::Load(keyring_file_, &why);
  if (!keyring) return "cold tier keyring_file " + why;
  checked_ = std::move(fresh);
  checked_keyring_ = std::move(keyring);
  return "";
}

void DaemonCold::ApplyCredentials() {
  if (checked_) {
    client_->UpdateCredentials(checked_->access_key, checked_->secret_key);
    spdlog::info("reload: cold tier credentials reloaded");
    checked_.reset();
  }
  if (checked_keyring_) {
    keys_->Set(checked_keyring_);
    spdlog::info("reload: cold tier keyring reloaded; sealing with key {}",
                 checked_keyring_->current());
    checked_keyring_.reset();
  }
}

std::string DaemonCold::Metrics() const { return cold::RenderColdMetrics(tier_->Stats()); }

}  // namespace gpucache
