// gpucachefs configuration: a TOML file (docs/configuration.md) or the built-in defaults.
//
// Loading is the one place where exceptions are used: a bad file stops start-up with a
// ConfigError whose message names the key, before anything is mounted.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cold_options.h"
#include "store/eviction/eviction_policy.h"
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

struct Config {
  // Data directories, one per device (fault domain): `data_dir = "..."` or `data_dirs = [...]`.
  std::vector<std::string> data_dirs = {"/var/lib/gpucache"};
  bool sync_commits = false;                // fdatasync each block before publishing it
  std::string backing_io = "posix";         // payload reads: "posix" (pread) or "uring"
  // When a start checks the block files: "background" (after mounting) or "before_mount".
  std::string verify_blocks = "background";
  Limits limits{.max_block_bytes = 256ull << 20};  // global limits ([limits])
  std::string eviction_policy{kDefaultPolicy};
  double reservation_lease = 30;            // seconds an idle, uncommitted .part survives
  // Share of each data directory's filesystem kept free for everything else on it (0..50 %).
  double min_free_percent = 5;
  std::vector<uint32_t> admin_uids = {0};   // may see every tenant and send admin requests
  std::vector<uint32_t> admin_gids;
  std::vector<TenantConfig> tenants;        // sorted by name; at least one
  std::string metrics_listen = "127.0.0.1:9110";  // Prometheus endpoint; empty: off
  std::string metrics_token_file;  // a bearer token /metrics asks for; empty: none
  double entry_timeout = 3600;     // seconds the kernel may cache committed entries/attributes
  double negative_timeout = 3600;  // seconds the kernel may cache a miss (a commit refreshes it)
  // "daemon": the daemon checks every walk into a tenant (any uid/gid lists, adr/0001).
  // "kernel": every tenant maps onto one owner uid and one group, the kernel checks mode bits
  // (default_permissions) and may cache tenant entries too (adr/0009).
  std::string permissions = "daemon";
  bool KernelPermissions() const { return permissions == "kernel"; }
  // [ram] bytes: the RAM tier's size (adr/0020); 0: off. Left out: DefaultRamBytes().
  uint64_t ram_bytes = 0;
  // [ram] promote: when a block is copied into the tier. "read": after an open the daemon
  // served is released; "commit": also as soon as it is committed (adr/0020, decision 5).
  std::string ram_promote = "read";
  bool PromoteOnCommit() const { return ram_promote == "commit"; }
  // [cold]: the optional S3 cold tier (docs/cold-tier.md), in the type the tier itself takes
  // (common/cold_options.h; fs/ does not include cold/). Keys are never read from this file.
  cold::ColdOptions cold;
};

// The store's limits: the global ones and every tenant's. A global max_open_files of 0 is
// DefaultOpenFilesPerTenant().
ResourceLimits ResourceLimitsOf(const Config& config);
// A quarter of the daemon's soft descriptor limit (at least 16; 0, unlimited, when it has
// none): what each tenant's reservations and open blocks may hold of it.
uint64_t DefaultOpenFilesPerTenant();

// The RAM tier's size when `[ram] bytes` is left out: 1/16 of the machine's memory (MemTotal),
// in whole MiB; 0 if /proc/meminfo cannot be read.
uint64_t DefaultRamBytes();
// The smallest RAM tier `[ram] bytes` accepts (besides 0, off).
inline constexpr uint64_t kMinRamBytes = 1 << 20;

// A configuration file larger than this is refused unread.
inline constexpr size_t kMaxConfigBytes = 1 << 20;

// Parses and validates a configuration file (a regular file, or a link to one, of at most
// kMaxConfigBytes). Throws ConfigError naming the file and key.
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
