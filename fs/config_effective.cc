// The effective configuration as TOML (`gpucachefs --check-config`, `.gpucache/config`): every
// key with the value in use, defaults filled in, so that it parses back to the same values.
#include <toml++/toml.h>

#include <sstream>

#include "fs/config.h"

namespace gpucache {

namespace {

constexpr double kMs = 1e3, kNs = 1e9;  // units per second, as config.cc reads them

// [cold] as the file gives it: seconds, not the tier's milliseconds; never the keys.
toml::table ColdTable(const cold::ColdOptions& k) {
  const cold::ColdTierOptions& t = k.tier;
  auto seconds = [](uint64_t ms) { return static_cast<double>(ms) / kMs; };
  toml::array retired;
  for (const std::string& r : t.retired_tenants) retired.push_back(r);
  return toml::table{
      {"enabled", k.enabled}, {"endpoint", k.s3.endpoint}, {"bucket", k.s3.bucket},
      {"region", k.s3.region}, {"credentials_file", k.s3.credentials_file}, {"prefix", t.prefix},
      {"write_back", std::string(ToString(t.write_back))},
      {"pack_target_bytes", int64_t(t.pack.target_bytes)},
      {"pack_max_blocks", int64_t(t.pack.max_blocks)},
      {"flush_interval", seconds(t.flush_interval_ms)}, {"max_jobs", int64_t(t.sink.max_jobs)},
      {"max_bytes", int64_t(t.sink.max_bytes)}, {"concurrency", int64_t(t.sink.concurrency)},
      {"max_attempts", int64_t(t.sink.max_attempts)},
      {"retry_base_delay", seconds(t.sink.backoff_base_ms)},
      {"retry_max_delay", seconds(t.sink.backoff_max_ms)},
      {"redrive_interval", seconds(t.sink.redrive_interval_ms)},
      {"refill_workers", int64_t(t.refill_workers)},
      {"refill_budget_bytes", int64_t(t.refill_budget_bytes)},
      {"connect_timeout", seconds(k.s3.connect_timeout_ms)},
      {"transfer_timeout", seconds(k.s3.transfer_timeout_ms)},
      {"retention", static_cast<double>(t.retention_ns) / kNs}, {"retired_tenants", retired},
      {"keyring_file", k.keyring_file}, {"accept_unsealed", t.accept_unsealed},
      {"known_places", int64_t(t.known_places)}};
}

}  // namespace

std::string EffectiveConfigText(const Config& c) {
  auto ids = [](const std::vector<uint32_t>& v) {
    toml::array a;
    for (uint32_t x : v) a.push_back(int64_t{x});
    return a;
  };
  auto limits = [](toml::table& t, const Limits& l) {
    t.insert("max_block_bytes", int64_t(l.max_block_bytes));
    t.insert("max_inflight_requests", int64_t(l.max_inflight_requests));
    t.insert("max_inflight_bytes", int64_t(l.max_inflight_bytes));
    t.insert("max_registrations", int64_t(l.max_registrations));
    t.insert("max_retained_bytes", int64_t(l.max_retained_bytes));
    t.insert("max_open_files", int64_t(l.max_open_files));
  };
  toml::table root;
  toml::array dirs;
  for (const std::string& d : c.data_dirs) dirs.push_back(d);
  root.insert("data_dirs", dirs);
  root.insert("sync_commits", c.sync_commits);
  root.insert("backing_io", c.backing_io);
  root.insert("verify_blocks", c.verify_blocks);
  toml::table lim;
  limits(lim, c.limits);
  lim.insert("eviction_policy", c.eviction_policy);
  lim.insert("reservation_lease", c.reservation_lease);
  lim.insert("min_free_percent", c.min_free_percent);
  root.insert("limits", lim);
  root.insert("admins", toml::table{{"uids", ids(c.admin_uids)}, {"gids", ids(c.admin_gids)}});
  toml::table tenants;
  for (const TenantConfig& t : c.tenants) {
    toml::table tt{{"uids", ids(t.uids)}, {"gids", ids(t.gids)}};
    limits(tt, t.limits);
    tenants.insert(t.name, tt);
  }
  root.insert("tenants", tenants);
  root.insert("metrics", toml::table{{"listen", c.metrics_listen}, {"bearer_token_file", c.metrics_token_file}});
  root.insert("fuse", toml::table{{"entry_timeout", c.entry_timeout},
                                  {"negative_timeout", c.negative_timeout},
                                  {"permissions", c.permissions}});
  root.insert("ram", toml::table{{"bytes", int64_t(c.ram_bytes)}, {"promote", c.ram_promote}});
  root.insert("cold", ColdTable(c.cold));
  std::ostringstream out;
  out << "# effective configuration (0: unlimited)\n" << root << "\n";
  return out.str();
}

}  // namespace gpucache
