#include "daemon/daemon_cold.h"

#include <spdlog/spdlog.h>

#include "cold/control.h"

namespace gpucache {
namespace {

cold::ColdTierOptions TierOptions(const ColdConfig& c) {
  cold::ColdTierOptions o;
  o.prefix = c.prefix;
  o.write_back = c.write_back == "manual" ? cold::WriteBack::kManual : cold::WriteBack::kAfterCommit;
  o.pack.target_bytes = c.pack_target_bytes;
  o.pack.max_blocks = c.pack_max_blocks;
  o.sink.max_jobs = c.max_jobs;
  o.sink.max_bytes = c.max_bytes;
  o.sink.concurrency = static_cast<int>(c.concurrency);
  o.sink.max_attempts = static_cast<int>(c.max_attempts);
  o.sink.backoff_base_ms = static_cast<uint64_t>(c.retry_base_delay * 1000);
  o.sink.backoff_max_ms = static_cast<uint64_t>(c.retry_max_delay * 1000);
  o.sink.redrive_interval_ms = static_cast<uint64_t>(c.redrive_interval * 1000);
  o.refill_workers = c.refill_workers;
  o.flush_interval_ms = static_cast<uint64_t>(c.flush_interval * 1000);
  o.refill_budget_bytes = c.refill_budget_bytes;
  o.retired_tenants = {c.retired_tenants.begin(), c.retired_tenants.end()};
  o.retention_ns = static_cast<uint64_t>(c.retention * 1e9);
  o.accept_unsealed = c.accept_unsealed;
  return o;
}

}  // namespace

std::optional<cold::S3Options> DaemonCold::CheckOptions(const ColdConfig& c, std::string* error) {
  cold::S3Options s3;
  s3.endpoint = c.endpoint;
  s3.bucket = c.bucket;
  s3.region = c.region;
  s3.credentials_file = c.credentials_file;
  s3.connect_timeout_ms = static_cast<uint32_t>(c.connect_timeout * 1000);
  s3.transfer_timeout_ms = static_cast<uint32_t>(c.transfer_timeout * 1000);
  cold::ApplyEnvironment(s3);
  if (std::string e = cold::LoadCredentialsFile(s3); !e.empty()) {
    *error = "[cold] " + e;
    return std::nullopt;
  }
  if (std::string e = s3.Validate(); !e.empty()) {
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

std::unique_ptr<DaemonCold> DaemonCold::Create(const ColdConfig& c, BlockStore& store,
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
  cold::ColdTierOptions tier_options = TierOptions(c);
  tier_options.keys = d->keys_;
  d->tier_ = std::make_unique<cold::ColdTier>(store, *d->client_, std::move(tier_options));
  spdlog::info("cold tier: {} bucket {} prefix '{}', write-back {}, sealing with key {}",
               s3.endpoint, s3.bucket, c.prefix, c.write_back, keyring->current());
  return d;
}

DaemonCold::~DaemonCold() {
  if (tier_) tier_->Stop();
}

void DaemonCold::Wire(Filesystem& fs, BlockStore& store) {
  cold::ColdTier* tier = tier_.get();
  store.SetCommitObserver([tier](const BlockAddress& a) { tier->OnCommitted(a); });
  tier->SetRefilledHook([&fs](const BlockAddress& a) { fs.BlockAppeared(a); });
  fs.control().AddExtension("cold.", [tier](const ExtensionCaller& c, std::string_view req) {
    cold::ColdCaller who{c.uid, c.gid, c.admin, {c.tenants.begin(), c.tenants.end()}};
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
