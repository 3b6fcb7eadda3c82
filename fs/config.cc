#include "fs/config.h"

#include "fs/meminfo.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "fs/metrics_http.h"
#include "store/eviction/eviction_policy.h"
#include "store/identity.h"
#include "store/posix_io.h"

namespace gpucache {
namespace {

constexpr double kMaxLeaseSeconds = 365.0 * 86400;
constexpr double kMs = 1e3, kNs = 1e9;  // units per second

constexpr char kDefaultConfig[] = R"(# gpucachefs configuration (docs/configuration.md lists every key).

# Where committed blocks live; created if missing. For several devices, give one directory
# per device instead: data_dirs = ["/srv/nvme0/gpucache", "/srv/nvme1/gpucache"].
data_dir = "/var/lib/gpucache"

# fdatasync every block before publishing it. A block torn by a power cut fails its checksums
# and becomes a clean miss either way; turn this on to keep more blocks across power loss.
sync_commits = false

# How committed payloads are read from the data directories: "posix" (pread through the page
# cache) or "uring" (io_uring into registered buffers, O_DIRECT where the filesystem allows;
# pread on tmpfs and wherever io_uring is refused). docs/performance.md has the measurements.
backing_io = "posix"

# When a start checks each block file against INDEX and the journal: "background" (the mount
# is up once they are read; each block is checked before its first use, a walk checks the
# rest) or "before_mount" (every file first, as before). adr/0016.
verify_blocks = "background"

# Global limits; 0 means unlimited. The same keys (but eviction_policy,
# reservation_lease and min_free_percent) may be set per tenant in its [tenants.NAME] table.
[limits]
max_block_bytes = 268435456      # larger blocks fail with EFBIG
max_inflight_requests = 0        # fills in flight (EAGAIN)
max_inflight_bytes = 0           # bytes written but not yet committed (EAGAIN)
max_registrations = 0            # reservations + committed + quarantined blocks (EAGAIN)
max_retained_bytes = 0           # committed + quarantined bytes; evicts, then ENOSPC
max_open_files = 0               # per tenant: .part files + blocks open (EAGAIN); 0: a quarter
                                 # of the daemon's file descriptor limit
eviction_policy = "prefix-lru"   # prefix-lru, prefix-reuse, prefix-tinylfu, lru, oldest
reservation_lease = 30.0         # seconds an idle, uncommitted .part survives
min_free_percent = 5.0           # of each data directory's filesystem, left free for the rest
                                 # of the host (evicts, then ENOSPC); 0 on a dedicated device

# Callers who see every tenant and may send admin requests through .gpucache/ctl.
[admins]
uids = [0]
gids = []

# One table per tenant: its directory name, the callers who belong to it, and optionally its
# own limits (max_retained_bytes here is the tenant's quota: evicts its own blocks, then EDQUOT).
[tenants.default]
uids = [0]
gids = []

[ram]
# The RAM tier (adr/0020): verified copies of recently read blocks in a private tmpfs, from which
# the kernel serves reads without asking the daemon (FUSE passthrough). The memory it may use, in
# bytes; 0 turns it off. Left out: 1/16 of the machine's memory.
# bytes = 4294967296

[metrics]
# Prometheus text exposition over HTTP at http://LISTEN/metrics (also <mountpoint>/.gpucache/metrics).
# Every tenant's counters: keep it on loopback. "" turns HTTP off.
listen = "127.0.0.1:9110"
# A file holding a token /metrics then asks for (Authorization: Bearer TOKEN; Prometheus's
# `authorization: {credentials_file: ...}`). Left out: any local user may read every tenant's
# counters.
# bearer_token_file = "/etc/gpucache/metrics.token"

[fuse]
# Seconds the kernel may cache committed entries and misses; the daemon invalidates them itself.
entry_timeout = 3600.0
negative_timeout = 3600.0
# Who checks access on path walks: "daemon" (any uid/gid lists; each walk into a tenant asks
# the daemon) or "kernel" (each tenant is one owner uid and one group; the kernel checks mode
# bits and caches tenant entries too, so a warm stat never leaves the kernel). adr/0009.
permissions = "daemon"

[cold]
# The optional S3 cold tier (docs/cold-tier.md): packs committed blocks into objects and
# refills them on request. Off by default. Endpoint and bucket may also come from
# GPUCACHE_S3_ENDPOINT / GPUCACHE_S3_BUCKET; keys only from credentials_file or
# GPUCACHE_S3_ACCESS_KEY / GPUCACHE_S3_SECRET_KEY, never from this file.
enabled = false
endpoint = ""                    # e.g. "http://127.0.0.1:7480"
bucket = ""
region = "us-east-1"
credentials_file = ""            # access_key=... and secret_key=... lines; re-read on SIGHUP
prefix = "gpucache/"
write_back = "after-commit"      # after-commit (packed in the background) or manual
pack_target_bytes = 67108864
pack_max_blocks = 1024
flush_interval = 2.0             # seconds between write-back rounds
max_jobs = 256                   # pending + failed pack jobs
max_bytes = 1073741824           # pending + failed pack bytes
concurrency = 4                  # uploads in flight
max_attempts = 5                 # per upload job, with exponential backoff and jitter
retry_base_delay = 0.5           # seconds before the 2nd attempt, doubling ...
retry_max_delay = 10.0           # ... up to this
redrive_interval = 30.0          # failed (temporary) jobs are retried after this; 0: never
refill_workers = 4               # threads running asynchronous refills
known_places = 65536             # blocks whose pack place this node remembers (one-GET refill); 0: off
refill_budget_bytes = 268435456  # default and ceiling per refill request
connect_timeout = 2.0
transfer_timeout = 30.0
retention = 0.0                  # seconds each new manifest is kept from reclaim
retired_tenants = []
# Seal keys (docs/cold-tier.md, "Seals and the keyring"): required when enabled; mode 0600.
keyring_file = ""
accept_unsealed = false          # refill objects written before seals (v3); see the docs
)";

// MemTotal from /proc/meminfo in bytes; 0 if it cannot be read.
uint64_t MemTotalBytes() { return MemInfoBytes("MemTotal:").value_or(0); }

class Reader {
 public:
  Reader(const toml::table& t, std::string origin) : t_(t), origin_(std::move(origin)) {}

  [[noreturn]] void Fail(const std::string& key, const std::string& why) const {
    throw ConfigError(origin_ + ": key '" + key + "': " + why);
  }

  void OnlyKeys(const toml::table& t, const std::string& prefix,
                std::initializer_list<std::string_view> allowed) const {
    for (const auto& [k, v] : t) {
      if (std::find(allowed.begin(), allowed.end(), k.str()) == allowed.end()) {
        Fail(prefix + std::string(k.str()), "unknown key (misspelt?)");
      }
    }
  }

  std::vector<uint32_t> Ids(const toml::table& t, const std::string& key, const std::string& name,
                            std::vector<uint32_t> def) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    const toml::array* a = n->as_array();
    if (!a) Fail(name, "must be an array of integer ids");
    std::vector<uint32_t> out;
    for (const auto& e : *a) {
      // value_exact: value<int64_t>() converts true to 1 and 1.0 to 1 (uid 1 an admin).
      auto v = e.value_exact<int64_t>();
      if (!v || *v < 0 || *v >= UINT32_MAX) Fail(name, "ids are integers 0..4294967294");
      out.push_back(static_cast<uint32_t>(*v));
    }
    return out;
  }

  template <typename T>
  T Get(const toml::table& t, const std::string& key, const std::string& name, T def) const {
    const toml::node* n = t.get(key);
    if (!n) return def;
    auto v = n->value_exact<T>();
    if constexpr (std::is_same_v<T, double>) {
      if (!v) v = n->value<double>();  // an integer is a fine number of seconds
      // TOML has nan and inf; no key here means either (a lease of nan never expires).
      if (v && !std::isfinite(*v)) Fail(name, "must be a finite number");
    }
    if (!v) Fail(name, "has the wrong type");
    if constexpr (std::is_same_v<T, std::string>) CheckText(*v, name);
    return *v;
  }

  // No string here has a use for control characters, and a NUL would cut a path short where
  // the daemon uses it while the check and the log show all of it (found by review: a
  // data_dir "/x/data\u0000-not-used" made the store in /x/data).
  void CheckText(const std::string& v, const std::string& name) const {
    for (unsigned char ch : v) {
      if (ch < 0x20 || ch == 0x7f) Fail(name, "contains a control character (\\u0000-\\u001f, \\u007f)");
    }
  }

  Limits ReadLimits(const toml::table& t, const std::string& prefix, Limits l) const {
    auto size = [&](const char* key, uint64_t def) {
      int64_t v = Get<int64_t>(t, key, prefix + key, static_cast<int64_t>(def));
      if (v < 0) Fail(prefix + key, "must be >= 0 (0: unlimited)");
      return static_cast<uint64_t>(v);
    };
    l.max_block_bytes = size("max_block_bytes", l.max_block_bytes);
    l.max_inflight_requests = size("max_inflight_requests", l.max_inflight_requests);
    l.max_inflight_bytes = size("max_inflight_bytes", l.max_inflight_bytes);
    l.max_registrations = size("max_registrations", l.max_registrations);
    l.max_retained_bytes = size("max_retained_bytes", l.max_retained_bytes);
    l.max_open_files = size("max_open_files", l.max_open_files);
    return l;
  }

  std::vector<std::string> Strings(const toml::table& t, const std::string& key) const {
    const toml::array* a = t.get(key) ? t.get(key)->as_array() : nullptr;
    if (!a) Fail(key, "must be an array of strings");
    std::vector<std::string> out;
    for (const auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v) Fail(key, "must be an array of strings");
      CheckText(*v, key);
      out.push_back(*v);
    }
    return out;
  }

  const toml::table* Table(const toml::table& t, const std::string& key) const {
    const toml::node* n = t.get(key);
    if (!n) return nullptr;
    if (!n->as_table()) Fail(key, "must be a table");
    return n->as_table();
  }

  uint64_t Positive(const toml::table& t, const char* key, uint64_t def, uint64_t max) const {
    int64_t v = Get<int64_t>(t, key, std::string("cold.") + key, static_cast<int64_t>(def));
    if (v <= 0 || static_cast<uint64_t>(v) > max) {
      Fail(std::string("cold.") + key, "must be 1.." + std::to_string(max));
    }
    return static_cast<uint64_t>(v);
  }

  // A number of seconds in the file as `unit`s (1000: milliseconds, 1e9: nanoseconds),
  // rounded to the nearest. `max` (seconds) keeps it within what its users hold it in (32 bits
  // of milliseconds, 64 of nanoseconds); without `zero_ok` it must be at least one unit, so
  // the effective configuration prints a value that parses again.
  uint64_t Seconds(const toml::table& t, const char* key, uint64_t def, double unit, bool zero_ok,
                   double max) const {
    double v = Get<double>(t, key, std::string("cold.") + key, static_cast<double>(def) / unit);
    uint64_t units = v >= 0 && v <= max ? static_cast<uint64_t>(std::llround(v * unit)) : 0;
    if (v < 0 || (!zero_ok && units == 0) || v > max) {
      Fail(std::string("cold.") + key, std::string(zero_ok ? "must be >= 0" : "must be at least 0.001") +
                                           " and at most " + std::to_string(int64_t(max)) + " seconds");
    }
    return units;
  }

  // [cold] into the tier's own options (common/cold_options.h): seconds in the file become
  // the milliseconds and nanoseconds the tier runs on, here and nowhere else.
  cold::ColdOptions ReadCold(const toml::table& t) const {
    OnlyKeys(t, "cold.", {"enabled", "endpoint", "bucket", "region", "credentials_file", "prefix",
                          "write_back", "pack_target_bytes", "pack_max_blocks", "flush_interval",
                          "max_jobs", "max_bytes", "concurrency", "refill_budget_bytes",
                          "connect_timeout", "transfer_timeout", "retention", "retired_tenants",
                          "max_attempts", "retry_base_delay", "retry_max_delay",
                          "redrive_interval", "refill_workers", "keyring_file", "accept_unsealed",
                          "known_places"});
    cold::ColdOptions c;
    c.enabled = Get<bool>(t, "enabled", "cold.enabled", c.enabled);
    ReadS3(t, c.s3);
    ReadTier(t, c.tier);
    c.keyring_file = FilePath(t, "keyring_file", "cold.keyring_file");
    if (c.enabled && c.keyring_file.empty()) {
      Fail("cold.keyring_file", "is required when the cold tier is enabled (objects are sealed)");
    }
    return c;
  }

  // A file re-read at every reload: absolute, or a daemon that detached (and moved to /) would
  // look for it elsewhere then, and refuse every reload until a restart. "" when not given.
  std::string FilePath(const toml::table& t, const char* key, const char* full) const {
    std::string path = Get<std::string>(t, key, full, "");
    if (!path.empty() && path[0] != '/') Fail(full, "must be an absolute path, not " + path);
    return path;
  }

  void ReadS3(const toml::table& t, cold::S3Options& s3) const {
    s3.endpoint = Get<std::string>(t, "endpoint", "cold.endpoint", s3.endpoint);
    s3.bucket = Get<std::string>(t, "bucket", "cold.bucket", s3.bucket);
    s3.region = Get<std::string>(t, "region", "cold.region", s3.region);
    s3.credentials_file = FilePath(t, "credentials_file", "cold.credentials_file");
    s3.connect_timeout_ms = static_cast<uint32_t>(
        Seconds(t, "connect_timeout", s3.connect_timeout_ms, kMs, false, 3600));
    s3.transfer_timeout_ms = static_cast<uint32_t>(
        Seconds(t, "transfer_timeout", s3.transfer_timeout_ms, kMs, false, 3600));
  }

  void ReadTier(const toml::table& t, cold::ColdTierOptions& o) const {
    o.prefix = Get<std::string>(t, "prefix", "cold.prefix", o.prefix);
    bool prefix_ok = o.prefix.size() <= 128 && (o.prefix.empty() || o.prefix.back() == '/');
    for (char ch : o.prefix) {
      prefix_ok &= (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '/' ||
                   ch == '-' || ch == '_' || ch == '.';
    }
    // Segments as the object store's keys take them (cold/s3_client.cc refuses a key with an
    // empty, "." or ".." segment): "./" or "a//" passed here and failed every object request.
    for (size_t at = 0; prefix_ok && at < o.prefix.size();) {
      size_t end = o.prefix.find('/', at);
      std::string_view segment(o.prefix.data() + at, end - at);
      prefix_ok = !segment.empty() && segment != "." && segment != "..";
      at = end + 1;
    }
    if (!prefix_ok) {
      Fail("cold.prefix", "empty, or segments of [a-z0-9._-] (not \".\" or \"..\") each ending with '/' (<= 128)");
    }
    std::string write_back = Get<std::string>(t, "write_back", "cold.write_back",
                                              std::string(ToString(o.write_back)));
    if (write_back != "after-commit" && write_back != "manual") {
      Fail("cold.write_back", "must be \"after-commit\" or \"manual\"");
    }
    o.write_back = write_back == "manual" ? cold::WriteBack::kManual : cold::WriteBack::kAfterCommit;
    o.pack.target_bytes = Positive(t, "pack_target_bytes", o.pack.target_bytes, 1ull << 40);
    o.pack.max_blocks = Positive(t, "pack_max_blocks", o.pack.max_blocks, 4096);
    o.flush_interval_ms = Seconds(t, "flush_interval", o.flush_interval_ms, kMs, false, 3600);
    o.sink.max_jobs = Positive(t, "max_jobs", o.sink.max_jobs, 1u << 20);
    o.sink.max_bytes = Positive(t, "max_bytes", o.sink.max_bytes, 1ull << 50);
    o.sink.concurrency = static_cast<int>(Positive(t, "concurrency", o.sink.concurrency, 64));
    o.refill_budget_bytes = Positive(t, "refill_budget_bytes", o.refill_budget_bytes, 1ull << 40);
    o.sink.max_attempts = static_cast<int>(Positive(t, "max_attempts", o.sink.max_attempts, 10));
    o.sink.backoff_base_ms = Seconds(t, "retry_base_delay", o.sink.backoff_base_ms, kMs, true, 600);
    o.sink.backoff_max_ms = Seconds(t, "retry_max_delay", o.sink.backoff_max_ms, kMs, true, 3600);
    if (o.sink.backoff_max_ms < o.sink.backoff_base_ms) {
      Fail("cold.retry_max_delay", "must be >= retry_base_delay");
    }
    o.sink.redrive_interval_ms =
        Seconds(t, "redrive_interval", o.sink.redrive_interval_ms, kMs, true, 86400);
    o.refill_workers = Positive(t, "refill_workers", o.refill_workers, 64);
    o.retention_ns = Seconds(t, "retention", o.retention_ns, kNs, true, 10 * kMaxLeaseSeconds);
    if (t.contains("retired_tenants")) {
      std::vector<std::string> retired = Strings(t, "retired_tenants");
      for (const std::string& r : retired) {
        if (!IsValidTenantName(r)) Fail("cold.retired_tenants", "lists an invalid tenant name");
      }
      o.retired_tenants = {retired.begin(), retired.end()};
    }
    o.accept_unsealed = Get<bool>(t, "accept_unsealed", "cold.accept_unsealed", o.accept_unsealed);
    int64_t known = Get<int64_t>(t, "known_places", "cold.known_places", int64_t(o.known_places));
    if (known < 0 || known > (int64_t{1} << 24)) Fail("cold.known_places", "must be 0..16777216");
    o.known_places = static_cast<size_t>(known);
  }

  Config Build() const {
    Config c;
    OnlyKeys(t_, "", {"data_dir", "data_dirs", "sync_commits", "backing_io", "verify_blocks", "limits", "admins",
                      "tenants", "fuse", "metrics", "cold", "ram"});
    c.ram_bytes = ReadRam(Table(t_, "ram"));
    c.ram_promote = ReadRamPromote(Table(t_, "ram"));
    if (const toml::table* cold = Table(t_, "cold")) c.cold = ReadCold(*cold);
    if (const toml::table* m = Table(t_, "metrics")) {
      OnlyKeys(*m, "metrics.", {"listen", "bearer_token_file"});
      c.metrics_listen = Get<std::string>(*m, "listen", "metrics.listen", c.metrics_listen);
      c.metrics_token_file = Get<std::string>(*m, "bearer_token_file", "metrics.bearer_token_file", "");
      if (!c.metrics_token_file.empty() && c.metrics_token_file[0] != '/') {
        Fail("metrics.bearer_token_file", "must be an absolute path");
      }
      sockaddr_in addr;
      std::string why;
      if (!c.metrics_listen.empty() && !ParseListenAddress(c.metrics_listen, &addr, &why)) {
        Fail("metrics.listen", why.substr(why.find(':') + 2));
      }
    }
    if (t_.contains("data_dir") && t_.contains("data_dirs")) {
      Fail("data_dirs", "give data_dir (one directory) or data_dirs (a list), not both");
    }
    if (t_.contains("data_dir")) {
      c.data_dirs = {Get<std::string>(t_, "data_dir", "data_dir", "")};
    } else if (t_.contains("data_dirs")) {
      c.data_dirs = Strings(t_, "data_dirs");
    }
    std::vector<std::string> seen;  // as written, and without "//", "/./" or a trailing '/'
    for (const std::string& d : c.data_dirs) {
      const char* key = t_.contains("data_dirs") ? "data_dirs" : "data_dir";
      if (d.empty() || d[0] != '/') Fail(key, "must be an absolute path");
      std::string n = std::filesystem::path(d).lexically_normal().string();
      while (n.size() > 1 && n.back() == '/') n.pop_back();
      for (const std::string& other : seen) {
        bool nested = n.starts_with(other + "/") || other.starts_with(n + "/") || other == "/" || n == "/";
        if (n == other) Fail(key, "lists " + d + " twice (as " + other + ")");
        if (nested) Fail(key, "lists " + d + " inside or around " + other + ": give each device its own directory");
      }
      seen.push_back(n);
    }
    if (c.data_dirs.empty()) Fail("data_dirs", "needs at least one directory");
    c.sync_commits = Get<bool>(t_, "sync_commits", "sync_commits", c.sync_commits);
    c.backing_io = Get<std::string>(t_, "backing_io", "backing_io", c.backing_io);
    c.verify_blocks = Get<std::string>(t_, "verify_blocks", "verify_blocks", c.verify_blocks);
    if (c.verify_blocks != "background" && c.verify_blocks != "before_mount") {
      Fail("verify_blocks", "must be \"background\" or \"before_mount\"");
    }
    if (c.backing_io != "posix" && c.backing_io != "uring") {
      Fail("backing_io", "must be \"posix\" or \"uring\"");
    }
    if (const toml::table* l = Table(t_, "limits")) {
      OnlyKeys(*l, "limits.", {"max_block_bytes", "max_inflight_requests", "max_inflight_bytes",
                               "max_registrations", "max_retained_bytes", "max_open_files", "eviction_policy",
                               "reservation_lease", "min_free_percent"});
      c.limits = ReadLimits(*l, "limits.", c.limits);
      if (c.limits.max_block_bytes == 0) Fail("limits.max_block_bytes", "must be at least 1");
      c.eviction_policy = Get<std::string>(*l, "eviction_policy", "limits.eviction_policy",
                                           c.eviction_policy);
      if (!MakePolicy(c.eviction_policy)) {
        std::string known;
        for (const std::string& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
        Fail("limits.eviction_policy", "unknown policy (known: " + known + ")");
      }
      c.reservation_lease = Get<double>(*l, "reservation_lease", "limits.reservation_lease",
                                        c.reservation_lease);
      // At least a millisecond: 1e-300 passed "> 0" and ran as a lease of 0 ns.
      if (c.reservation_lease < 0.001 || c.reservation_lease > kMaxLeaseSeconds) {
        Fail("limits.reservation_lease", "must be at least 0.001 and at most 31536000 seconds (a year)");
      }
      c.min_free_percent = Get<double>(*l, "min_free_percent", "limits.min_free_percent",
                                       c.min_free_percent);
      if (!(c.min_free_percent >= 0 && c.min_free_percent <= 50)) {
        Fail("limits.min_free_percent", "must be between 0 and 50 (percent of each data directory's filesystem)");
      }
    }
    if (const toml::table* a = Table(t_, "admins")) {
      OnlyKeys(*a, "admins.", {"uids", "gids"});
      c.admin_uids = Ids(*a, "uids", "admins.uids", c.admin_uids);
      c.admin_gids = Ids(*a, "gids", "admins.gids", {});
    }
    if (const toml::table* f = Table(t_, "fuse")) {
      OnlyKeys(*f, "fuse.", {"entry_timeout", "negative_timeout", "permissions"});
      c.entry_timeout = Get<double>(*f, "entry_timeout", "fuse.entry_timeout", c.entry_timeout);
      c.negative_timeout =
          Get<double>(*f, "negative_timeout", "fuse.negative_timeout", c.negative_timeout);
      if (c.entry_timeout < 0) Fail("fuse.entry_timeout", "must be >= 0");
      if (c.negative_timeout < 0) Fail("fuse.negative_timeout", "must be >= 0");
      c.permissions = Get<std::string>(*f, "permissions", "fuse.permissions", c.permissions);
      if (c.permissions != "daemon" && c.permissions != "kernel") {
        Fail("fuse.permissions", "must be \"daemon\" or \"kernel\"");
      }
    }
    const toml::table* tenants = Table(t_, "tenants");
    if (!tenants || tenants->empty()) Fail("tenants", "configure at least one [tenants.NAME]");
    for (const auto& [name, node] : *tenants) {
      std::string key = "tenants." + std::string(name.str());
      if (!IsValidTenantName(name.str())) Fail(key, "tenant names are 1-64 of [a-z0-9_-]");
      const toml::table* t = node.as_table();
      if (!t) Fail(key, "must be a table with uids and/or gids");
      OnlyKeys(*t, key + ".", {"uids", "gids", "max_block_bytes", "max_inflight_requests",
                               "max_inflight_bytes", "max_registrations", "max_retained_bytes",
                               "max_open_files"});
      TenantConfig tc{std::string(name.str()), Ids(*t, "uids", key + ".uids", {}),
                      Ids(*t, "gids", key + ".gids", {}), ReadLimits(*t, key + ".", Limits{})};
      if (tc.uids.empty() && tc.gids.empty()) Fail(key, "needs at least one uid or gid");
      c.tenants.push_back(std::move(tc));
    }
    std::sort(c.tenants.begin(), c.tenants.end(),
              [](const TenantConfig& a, const TenantConfig& b) { return a.name < b.name; });
    if (c.KernelPermissions()) CheckKernelPermissions(c);
    return c;
  }

 private:
  // [ram] bytes: 0 (off), or from 1 MiB up to the machine's memory.
  uint64_t ReadRam(const toml::table* t) const {
    if (!t) return DefaultRamBytes();
    OnlyKeys(*t, "ram.", {"bytes", "promote"});
    const toml::node* n = t->get("bytes");
    if (!n) return DefaultRamBytes();
    std::optional<int64_t> v = n->value_exact<int64_t>();
    if (!v) Fail("ram.bytes", "must be an integer number of bytes (0: the RAM tier is off)");
    if (*v == 0) return 0;
    if (*v < int64_t{kMinRamBytes}) {
      Fail("ram.bytes", "must be 0 (off) or at least " + std::to_string(kMinRamBytes) + " (1 MiB)");
    }
    uint64_t memory = MemTotalBytes();
    if (memory != 0 && static_cast<uint64_t>(*v) > memory) {
      Fail("ram.bytes", "is more than this machine's memory (MemTotal " + std::to_string(memory) +
                            " bytes); 1/16 of it is the default");
    }
    return static_cast<uint64_t>(*v);
  }

  // [ram] promote: "read" (the default) or "commit".
  std::string ReadRamPromote(const toml::table* t) const {
    if (!t) return "read";
    std::string v = Get<std::string>(*t, "promote", "ram.promote", "read");
    if (v != "read" && v != "commit") Fail("ram.promote", "must be \"read\" or \"commit\"");
    return v;
  }

  // With kernel permission checks, access must be expressible in mode bits: root (who
  // bypasses them) and, per tenant, one owner uid and one group (adr/0009).
  void CheckKernelPermissions(const Config& c) const {
    for (const TenantConfig& t : c.tenants) {
      std::string key = "tenants." + t.name;
      if (std::count_if(t.uids.begin(), t.uids.end(), [](uint32_t u) { return u != 0; }) > 1) {
        Fail(key + ".uids", "fuse.permissions = \"kernel\" allows one uid besides 0 per tenant; "
                            "put the members in a group and list its gid");
      }
      if (t.gids.size() > 1) {
        Fail(key + ".gids", "fuse.permissions = \"kernel\" allows one gid per tenant");
      }
    }
    for (uint32_t u : c.admin_uids) {
      if (u != 0) Fail("admins.uids", "fuse.permissions = \"kernel\" allows only uid 0 as admin");
    }
    if (!c.admin_gids.empty()) {
      Fail("admins.gids", "fuse.permissions = \"kernel\" allows no admin groups");
    }
  }

  const toml::table& t_;
  std::string origin_;
};

}  // namespace

Config ParseConfig(const std::string& text, const std::string& origin) {
  toml::table t;
  try {
    t = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw ConfigError(origin + ":" + std::to_string(e.source().begin.line) + ": " +
                      std::string(e.description()));
  }
  return Reader(t, origin).Build();
}

Config LoadConfig(const std::string& path) {
  // Read here, not by toml::parse_file: a FIFO or a device named as the file must not hang a
  // start or a reload, and /dev/zero must not grow the daemon (adr/0017).
  std::string why;
  std::optional<std::string> text = ReadSmallRegularFile(path, kMaxConfigBytes, &why);
  if (!text) throw ConfigError(why);
  toml::table t;
  try {
    t = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    throw ConfigError(path + ":" + std::to_string(e.source().begin.line) + ": " +
                      std::string(e.description()));
  }
  return Reader(t, path).Build();
}

uint64_t DefaultOpenFilesPerTenant() {
  rlimit fds{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) != 0 || fds.rlim_cur == RLIM_INFINITY) return 0;
  return std::max<uint64_t>(16, static_cast<uint64_t>(fds.rlim_cur) / 4);
}

ResourceLimits ResourceLimitsOf(const Config& config) {
  ResourceLimits limits;
  limits.global = config.limits;
  if (limits.global.max_open_files == 0) limits.global.max_open_files = DefaultOpenFilesPerTenant();
  for (const TenantConfig& t : config.tenants) limits.tenants[t.name] = t.limits;
  limits.all_tenants_listed = true;
  return limits;
}

uint64_t DefaultRamBytes() { return MemTotalBytes() / 16 / (1 << 20) * (1 << 20); }

Config DefaultConfig() { return ParseConfig(kDefaultConfig, "<built-in defaults>"); }

std::string DefaultConfigText() { return kDefaultConfig; }

}  // namespace gpucache
