#include "fs/metrics.h"

#include "fs/log.h"

#include <string.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <vector>

#include "common/control_protocol.h"
#include "fs/errno_map.h"

namespace gpucache {
namespace {

thread_local std::string t_request_tenant;
thread_local bool t_request_repeats_refusal = false;

std::string TenantLabel(const std::string& tenant) { return Label("tenant", tenant); }

// Integers exactly (a counter past a million must not become 1e+06), the rest round-trip.
std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // the shortest that round-trips
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace

std::string_view ToString(FuseOp op) {
  switch (op) {
    case FuseOp::kLookup: return "lookup";
    case FuseOp::kGetAttr: return "getattr";
    case FuseOp::kSetAttr: return "setattr";
    case FuseOp::kOpen: return "open";
    case FuseOp::kRead: return "read";
    case FuseOp::kWrite: return "write";
    case FuseOp::kCreate: return "create";
    case FuseOp::kFlush: return "flush";
    case FuseOp::kRelease: return "release";
    case FuseOp::kRename: return "rename";
    case FuseOp::kUnlink: return "unlink";
    case FuseOp::kMkDir: return "mkdir";
    case FuseOp::kReadDir: return "readdir";
    case FuseOp::kGetXattr: return "getxattr";
    case FuseOp::kSetXattr: return "setxattr";
    case FuseOp::kOther: return "other";
  }
  return "other";
}

std::string Label(const char* name, const std::string& value) {
  std::string out = std::string(name) + "=\"";
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void MetricsWriter::Family(const std::string& name, const char* type, const char* help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void MetricsWriter::Sample(const std::string& name, const std::string& labels, double value) {
  out_ += name;
  if (!labels.empty()) out_ += "{" + labels + "}";
  out_ += " " + FormatValue(value) + "\n";
}

const char* ContentTypeOf(MetricsFormat format) {
  return format == MetricsFormat::kOpenMetrics
             ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
             : "text/plain; version=0.0.4; charset=utf-8";
}

std::string ToOpenMetrics(const std::string& text) {
  // Counter families: their HELP and TYPE lines name the family without `_total`.
  std::set<std::string> counters;
  std::istringstream scan(text);
  for (std::string line; std::getline(scan, line);) {
    std::istringstream f(line);
    std::string hash, kind, name, type;
    f >> hash >> kind >> name >> type;
    if (hash == "#" && kind == "TYPE" && type == "counter" && name.ends_with("_total")) {
      counters.insert(name);
    }
  }
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    for (const char* kind : {"# HELP ", "# TYPE "}) {
      if (!line.starts_with(kind)) continue;
      size_t start = std::strlen(kind), end = line.find(' ', start);
      std::string name = line.substr(start, end - start);
      if (counters.count(name)) line.erase(start + name.size() - 6, 6);  // drop "_total"
    }
    out += line + "\n";
  }
  return out + "# EOF\n";
}

void Metrics::RecordOp(FuseOp op, std::chrono::nanoseconds elapsed) {
  Histogram& h = ops_[static_cast<size_t>(op)];
  double seconds = std::chrono::duration<double>(elapsed).count();
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      h.buckets[i].fetch_add(1, kRelaxed);
      break;  // cumulative counts are summed at render time
    }
  }
  h.count.fetch_add(1, kRelaxed);
  h.sum_ns.fetch_add(static_cast<uint64_t>(elapsed.count()), kRelaxed);
}

Metrics::TenantIo& Metrics::Of(const std::string& tenant) {
  MutexLock lock(mu_);
  auto& slot = io_[tenant];
  if (!slot) slot = std::make_unique<TenantIo>();
  return *slot;  // never erased: the reference stays valid
}

void Metrics::RecordBlockRead(const std::string& tenant, uint64_t bytes) {
  TenantIo& io = Of(tenant);
  io.reads.fetch_add(1, kRelaxed);
  io.read_bytes.fetch_add(bytes, kRelaxed);
}

void Metrics::NoteTenant(std::string_view tenant) { t_request_tenant.assign(tenant); }
void Metrics::NoteRepeatedRefusal() { t_request_repeats_refusal = true; }
bool Metrics::RepeatedRefusal() { return t_request_repeats_refusal; }
void Metrics::BeginRequest() {
  t_request_tenant.clear();
  t_request_repeats_refusal = false;
}
const std::string& Metrics::CurrentTenant() { return t_request_tenant; }

void Metrics::RecordRefusal(StatusCode s) {
  MutexLock lock(mu_);
  refusals_[{t_request_tenant, s}]++;
}

uint64_t Metrics::Refusals(StatusCode s) const {
  MutexLock lock(mu_);
  uint64_t n = 0;
  for (const auto& [key, count] : refusals_) n += key.second == s ? count : 0;
  return n;
}

void Metrics::RenderIo(MetricsWriter& w, const MetricsViewer& viewer) {
  struct Series {
    const char* name;
    const char* help;
    std::atomic<uint64_t> TenantIo::*field;
  };
  const Series series[] = {
      {"gpucache_block_opens_total", "Opens of committed blocks (every open reaches the daemon).",
       &TenantIo::opens},
      {"gpucache_block_reads_total",
       "Reads of committed blocks the daemon served (page-cache hits are not seen).", &TenantIo::reads},
      {"gpucache_read_bytes_total", "Payload bytes the daemon served to readers.", &TenantIo::read_bytes},
      {"gpucache_written_bytes_total", "Payload bytes written by fills.", &TenantIo::written_bytes},
  };
  MutexLock lock(mu_);
  for (const Series& s : series) {
    w.Family(s.name, "counter", s.help);
    for (const auto& [tenant, io] : io_) {
      if (viewer.show_tenant(tenant)) w.Sample(s.name, TenantLabel(tenant), double((*io.*s.field).load()));
    }
  }
}

// Each configured limit (0, none, is left out), by tenant ("" for the global ones), so alerts
// can compare usage with it: gpucache_retained_bytes / on(tenant)
// gpucache_limit{limit="max_retained_bytes"} (docs/metrics.md).
void Metrics::RenderLimits(MetricsWriter& w, const MetricsViewer& viewer) {
  if (!limits_source_) return;
  ResourceLimits limits = limits_source_();
  w.Family("gpucache_limit", "gauge",
           "A configured limit, by tenant (\"\" for the global one) and name ([limits] and "
           "[tenants.NAME] in the configuration; bytes or counts).");
  auto render = [&](const std::string& tenant, const Limits& l) {
    const std::pair<const char*, uint64_t> named[] = {
        {"max_block_bytes", l.max_block_bytes},       {"max_inflight_requests", l.max_inflight_requests},
        {"max_inflight_bytes", l.max_inflight_bytes}, {"max_registrations", l.max_registrations},
        {"max_retained_bytes", l.max_retained_bytes}, {"max_open_files", l.max_open_files}};
    for (const auto& [name, value] : named) {
      if (value != 0) w.Sample("gpucache_limit", TenantLabel(tenant) + "," + Label("limit", name), double(value));
    }
  };
  if (viewer.operator_view) render("", limits.global);
  for (const auto& [tenant, l] : limits.tenants) {
    if (viewer.show_tenant(tenant)) render(tenant, l);
  }
}

void Metrics::RenderRefusals(MetricsWriter& w, const MetricsViewer& viewer) {
  w.Family("gpucache_refusals_total", "counter",
           "Requests answered with an error, by tenant (empty: none named), errno and reason.");
  MutexLock lock(mu_);
  for (const auto& [key, n] : refusals_) {
    const auto& [tenant, code] = key;
    // A refusal before any tenant was named (the root, .gpucache) is the operator's business.
    if (tenant.empty() ? !viewer.operator_view : !viewer.show_tenant(tenant)) continue;
    w.Sample("gpucache_refusals_total",
             TenantLabel(tenant) + "," + Label("errno", control_protocol::ErrnoName(ToErrno(code))) + "," +
                 Label("reason", std::string(ToString(code))),
             double(n));
  }
}

void Metrics::RenderOps(MetricsWriter& w) {
  w.Family("gpucache_fuse_op_seconds", "histogram", "FUSE operation latency, by operation.");
  for (size_t i = 0; i < kFuseOpCount; ++i) {
    const Histogram& h = ops_[i];
    uint64_t count = h.count.load();
    if (count == 0) continue;
    std::string op = Label("op", std::string(ToString(static_cast<FuseOp>(i))));
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
      cumulative += h.buckets[b].load();
      w.Sample("gpucache_fuse_op_seconds_bucket", op + "," + Label("le", FormatValue(kBuckets[b])),
               double(cumulative));
    }
    w.Sample("gpucache_fuse_op_seconds_bucket", op + ",le=\"+Inf\"", double(count));
    w.Sample("gpucache_fuse_op_seconds_sum", op, double(h.sum_ns.load()) / 1e9);
    w.Sample("gpucache_fuse_op_seconds_count", op, double(count));
  }
}

std::string Metrics::Render(BlockAdmin& store, const MetricsViewer& viewer) {
  StoreStats stats = store.Stats();
  MetricsWriter w;
  // Series of the whole daemon (its process, its FUSE operations, its I/O, its RAM tier, its
  // log) are the operator's: counted over every tenant, they would show a member the others'
  // activity as it happens (review, 2026-12-07: a uid in no tenant watched the mkdir and write
  // counts rise with another tenant's commits). The epoch, drain and start state stay for all.
  const bool whole_daemon = viewer.operator_view;
  if (whole_daemon) RenderProcessMetrics(w);
  w.Family("gpucache_epoch", "gauge", "Current epoch (bumped at every start and fence).");
  w.Sample("gpucache_epoch", "", static_cast<double>(stats.epoch));
  w.Family("gpucache_automatic_fences_total", "counter",
           "Fences the daemon made itself, an epoch having given out its 4 billion region ids; its open fills heard ESTALE.");
  w.Sample("gpucache_automatic_fences_total", "", static_cast<double>(stats.automatic_fences));
  w.Family("gpucache_draining", "gauge", "1 while new fills are refused for an upgrade.");
  w.Sample("gpucache_draining", "", stats.draining ? 1 : 0);
  w.Family("gpucache_blocks_unverified", "gauge",
           "Blocks indexed from INDEX and the journal whose files the start's background walk has "
           "not checked yet (adr/0016); 0 once it finished.");
  w.Sample("gpucache_blocks_unverified", "", double(stats.blocks_unverified));
  w.Family("gpucache_verify_walk_running", "gauge", "1 while the start's background walk runs.");
  w.Sample("gpucache_verify_walk_running", "", stats.verify_walk_running ? 1 : 0);
  if (whole_daemon) {
    RenderBackingMetrics(w, store, backing_io_stats_ ? backing_io_stats_() : MediumIoStats{}, true);
    RenderRamMetrics(w, ram_source_ ? ram_source_() : RamMetrics{});
  }

  struct Series {
    const char* name;
    const char* type;
    const char* help;
    std::function<double(const TenantCounters&)> value;
  };
  const Series series[] = {
      {"gpucache_blocks", "gauge", "Committed blocks.", [](auto& c) { return c.usage.blocks; }},
      {"gpucache_committed_bytes", "gauge", "Committed payload bytes.", [](auto& c) { return c.usage.bytes; }},
      {"gpucache_retained_bytes", "gauge", "Committed plus quarantined bytes (what quotas count).",
       [](auto& c) { return c.usage.retained_bytes(); }},
      {"gpucache_quarantined_blocks", "gauge", "Blocks awaiting reclaim.",
       [](auto& c) { return c.usage.quarantined_blocks; }},
      {"gpucache_quarantined_bytes", "gauge", "Bytes awaiting reclaim.",
       [](auto& c) { return c.usage.quarantined_bytes; }},
      {"gpucache_inflight_reservations", "gauge", "Fills in flight.",
       [](auto& c) { return c.usage.reservations; }},
      {"gpucache_open_blocks", "gauge",
       "Blocks open for reading (each, as each fill, holds a file descriptor: limits.max_open_files).",
       [](auto& c) { return c.usage.open_readers; }},
      {"gpucache_inflight_bytes", "gauge", "Bytes written, or being written, to fills not yet committed.",
       [](auto& c) { return c.usage.inflight_bytes; }},
      {"gpucache_hits_total", "counter",
       "Lookups that found a committed block: path lookups the daemon saw and ctl lookups.",
       [](auto& c) { return c.hits; }},
      {"gpucache_prefix_hits_total", "counter", "Prefix hits (ctl lookups).",
       [](auto& c) { return c.prefix_hits; }},
      {"gpucache_commits_total", "counter", "Blocks committed.", [](auto& c) { return c.commits; }},
      {"gpucache_checksum_failures_total", "counter", "Blocks whose bytes failed their checksums.",
       [](auto& c) { return c.checksum_failures; }},
      {"gpucache_quarantined_total", "counter", "Blocks that entered quarantine.",
       [](auto& c) { return c.quarantined; }},
      {"gpucache_reclaimed_total", "counter", "Quarantined blocks freed.", [](auto& c) { return c.reclaimed; }},
      {"gpucache_fenced_total", "counter", "Fills fenced by an epoch bump.", [](auto& c) { return c.fenced; }},
      {"gpucache_expired_total", "counter", "Fills abandoned past their lease.", [](auto& c) { return c.expired; }},
  };
  for (const Series& s : series) {
    w.Family(s.name, s.type, s.help);
    for (const auto& [tenant, c] : stats.tenants) {
      if (viewer.show_tenant(tenant)) w.Sample(s.name, TenantLabel(tenant), s.value(c));
    }
  }
  RenderLimits(w, viewer);
  // One family at a time: OpenMetrics refuses interleaved families.
  w.Family("gpucache_misses_total", "counter",
           "Lookups that found no committed block (path lookups the daemon saw and ctl lookups), by reason.");
  for (const auto& [tenant, c] : stats.tenants) {
    if (!viewer.show_tenant(tenant)) continue;
    uint64_t explained = c.misses_incompatible + c.misses_quarantined + c.misses_fenced;
    const std::pair<const char*, uint64_t> reasons[] = {
        {"absent", c.misses - std::min(c.misses, explained)},
        {"incompatible", c.misses_incompatible},
        {"quarantined", c.misses_quarantined},
        {"fenced", c.misses_fenced}};
    for (const auto& [reason, n] : reasons) {
      w.Sample("gpucache_misses_total", TenantLabel(tenant) + "," + Label("reason", reason), double(n));
    }
  }
  w.Family("gpucache_removals_total", "counter", "Blocks removed from the namespace, by reason.");
  for (const auto& [tenant, c] : stats.tenants) {
    if (!viewer.show_tenant(tenant)) continue;
    w.Sample("gpucache_removals_total", TenantLabel(tenant) + ",reason=\"evicted\"", double(c.evictions));
    w.Sample("gpucache_removals_total", TenantLabel(tenant) + ",reason=\"invalidated\"",
             double(c.invalidations));
  }
  RenderIo(w, viewer);
  RenderRefusals(w, viewer);
  if (!whole_daemon) return w.str();
  RenderOps(w);
  w.Family("gpucache_log_lines_suppressed_total", "counter",
           "Log lines a rate limit left out: a member's actions past 10 a second per uid, or a repeated event within its interval.");
  w.Sample("gpucache_log_lines_suppressed_total", "", double(LogLinesSuppressed()));
  w.Family("gpucache_config_reloads_total", "counter",
           "Configuration reloads (SIGHUP) by result; a failed one changed nothing and logged why.");
  w.Sample("gpucache_config_reloads_total", "result=\"ok\"", double(reloads_ok_.load(kRelaxed)));
  w.Sample("gpucache_config_reloads_total", "result=\"failed\"", double(reloads_failed_.load(kRelaxed)));
  return w.str();
}

}  // namespace gpucache
