// gpucachefs configuration: a TOML file (docs/configuration.md) or the built-in defaults.
//
// Loading is the one place where exceptions are used: a bad file stops start-up with a
// ConfigError whose message names the key, before anything is mounted.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/limits.h"

namespace gpucache {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TenantConfig {
  std::string name;             // directory name under the mountpoint
  std::vector<uint32_t> uids;   // callers with one of these uids are members
  std::vector<uint32_t> gids;   // ... or with one of these as primary or supplementary group
  Limits limits;                // this tenant's own limits (0: none)
};

// [cold]: the optional S3 cold tier (docs/cold-tier.md). Plain data: fs/ does not include
// cold/; the daemon's main turns this into the cold tier's options. Keys are never read from
// this file: they come from credentials_file or the GPUCACHE_S3_* environment.
struct ColdConfig {
  bool enabled = false;
  std::string endpoint;                       // http(s)://host:port (or GPUCACHE_S3_ENDPOINT)
  std::string bucket;                         // or GPUCACHE_S3_BUCKET
  std::string region = "us-east-1";           // SigV4 signing region
  std::string credentials_file;               // access_key=/secret_key= lines; re-read on SIGHUP
  std::string prefix = "gpucache/";           // key prefix in the bucket
  std::string write_back = "after-commit";    // after-commit (background) or manual
  uint64_t pack_target_bytes = 64ull << 20;   // close a pack at this many payload bytes
  uint64_t pack_max_blocks = 1024;            // ... or this many blocks
  double flush_interval = 2.0;                // seconds between write-back rounds
  uint64_t max_jobs = 256;                    // sink: pending + failed jobs
  uint64_t max_bytes = 1ull << 30;            // sink: pending + failed bytes
  uint64_t concurrency = 4;                   // uploads in flight
  uint64_t max_attempts = 5;                  // sink: attempts per job before the failed queue
  double retry_base_delay = 0.5;              // seconds: backoff after the first failure ...
  double retry_max_delay = 10.0;              // ... doubling up to this (jittered)
  double redrive_interval = 30.0;             // seconds: failed (temporary) jobs retried; 0: never
  uint64_t refill_workers = 4;                // threads running asynchronous refills
  uint64_t refill_budget_bytes = 256ull << 20;  // default and ceiling per refill request
  double connect_timeout = 2.0;               // seconds
  double transfer_timeout = 30.0;             // seconds, whole request
  double retention = 0;                       // seconds each new manifest is retained
  std::vector<std::string> retired_tenants;   // never packed, never refilled
  std::string keyring_file;                   // seal keys (required when enabled); SIGHUP re-reads
  bool accept_unsealed = false;               // refill unsealed (v1 locator / v3 manifest) objects
};

struct Config {
  // Data directories, one per device (fault domain): `data_dir = "..."` or `data_dirs = [...]`.
  std::vector<std::string> data_dirs = {"/var/lib/gpucache"};
  bool sync_commits = false;                // fdatasync each block before publishing it
  std::string backing_io = "posix";         // payload reads: "posix" (pread) or "uring"
  Limits limits{.max_block_bytes = 256ull << 20};  // global limits ([limits])
  std::string eviction_policy = "prefix-lru";
  double reservation_lease = 30;            // seconds an idle, uncommitted .part survives
  std::vector<uint32_t> admin_uids = {0};   // may see every tenant and send admin requests
  std::vector<uint32_t> admin_gids;
  std::vector<TenantConfig> tenants;        // sorted by name; at least one
  std::string metrics_listen = "127.0.0.1:9110";  // Prometheus endpoint; empty: off
  double entry_timeout = 3600;     // seconds the kernel may cache committed entries/attributes
  double negative_timeout = 3600;  // seconds the kernel may cache a miss (a commit refreshes it)
  // "daemon": the daemon checks every walk into a tenant (any uid/gid lists, adr/0001).
  // "kernel": every tenant maps onto one owner uid and one group, the kernel checks mode bits
  // (default_permissions) and may cache tenant entries too (adr/0009).
  std::string permissions = "daemon";
  bool KernelPermissions() const { return permissions == "kernel"; }
  ColdConfig cold;
};

// The store's limits: the global ones and every tenant's.
ResourceLimits ResourceLimitsOf(const Config& config);

// Parses and validates a configuration file. Throws ConfigError naming the file and key.
Config LoadConfig(const std::string& path);
// Parses configuration text (`origin` names it in messages).
Config ParseConfig(const std::string& text, const std::string& origin);
// The built-in defaults: data in /var/lib/gpucache, one tenant "default" for root.
Config DefaultConfig();
// `config` as a TOML file with every key, defaults included (gpucachefs --check-config).
std::string EffectiveConfigText(const Config& config);
// The built-in defaults as a commented TOML file, a starting point for /etc/gpucache.
std::string DefaultConfigText();

}  // namespace gpucache
