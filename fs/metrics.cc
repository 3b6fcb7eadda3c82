#include "fs/metrics.h"

#include <string.h>

#include <sstream>

#include "fs/errno_map.h"

namespace gpucache {

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

void Metrics::RecordOp(FuseOp op, std::chrono::nanoseconds elapsed) {
  Histogram& h = ops_[static_cast<size_t>(op)];
  double seconds = std::chrono::duration<double>(elapsed).count();
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) {
      h.buckets[i].fetch_add(1, std::memory_order_relaxed);
      break;  // cumulative counts are summed at render time
    }
  }
  h.count.fetch_add(1, std::memory_order_relaxed);
  h.sum_ns.fetch_add(static_cast<uint64_t>(elapsed.count()), std::memory_order_relaxed);
}

namespace {

class Writer {
 public:
  void Family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    out_ << name;
    if (!labels.empty()) out_ << "{" << labels << "}";
    out_ << " " << value << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string TenantLabel(const std::string& tenant) { return "tenant=\"" + tenant + "\""; }

}  // namespace

std::string Metrics::Render(BlockStore& store,
                            const std::function<bool(const std::string&)>& show_tenant) {
  StoreStats stats = store.Stats();
  Writer w;
  w.Family("gpucache_epoch", "gauge", "Current epoch (bumped at every start and fence).");
  w.Sample("gpucache_epoch", "", static_cast<double>(stats.epoch));
  w.Family("gpucache_draining", "gauge", "1 while new fills are refused for an upgrade.");
  w.Sample("gpucache_draining", "", stats.draining ? 1 : 0);
  w.Family("gpucache_backing_errors_total", "counter",
           "Renames and unlinks of block files in the data directories that failed.");
  w.Sample("gpucache_backing_errors_total", "", static_cast<double>(stats.medium_errors));

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
      {"gpucache_inflight_bytes", "gauge", "Bytes written to fills not yet committed.",
       [](auto& c) { return c.usage.inflight_bytes; }},
      {"gpucache_hits_total", "counter", "Exact hits.", [](auto& c) { return c.hits; }},
      {"gpucache_prefix_hits_total", "counter", "Prefix hits.", [](auto& c) { return c.prefix_hits; }},
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
      if (show_tenant(tenant)) w.Sample(s.name, TenantLabel(tenant), s.value(c));
    }
  }
  w.Family("gpucache_misses_total", "counter", "Misses, by reason.");
  w.Family("gpucache_removals_total", "counter", "Blocks removed from the namespace, by reason.");
  for (const auto& [tenant, c] : stats.tenants) {
    if (!show_tenant(tenant)) continue;
    uint64_t explained = c.misses_incompatible + c.misses_quarantined + c.misses_fenced;
    w.Sample("gpucache_misses_total", TenantLabel(tenant) + ",reason=\"absent\"",
             static_cast<double>(c.misses - std::min(c.misses, explained)));
    w.Sample("gpucache_misses_total", TenantLabel(tenant) + ",reason=\"incompatible\"",
             static_cast<double>(c.misses_incompatible));
    w.Sample("gpucache_misses_total", TenantLabel(tenant) + ",reason=\"quarantined\"",
             static_cast<double>(c.misses_quarantined));
    w.Sample("gpucache_misses_total", TenantLabel(tenant) + ",reason=\"fenced\"",
             static_cast<double>(c.misses_fenced));
    w.Sample("gpucache_removals_total", TenantLabel(tenant) + ",reason=\"evicted\"",
             static_cast<double>(c.evictions));
    w.Sample("gpucache_removals_total", TenantLabel(tenant) + ",reason=\"invalidated\"",
             static_cast<double>(c.invalidations));
  }
  w.Family("gpucache_read_bytes_total", "counter", "Payload bytes served to readers through FUSE.");
  w.Sample("gpucache_read_bytes_total", "", static_cast<double>(read_bytes_.load()));
  w.Family("gpucache_written_bytes_total", "counter", "Payload bytes written by fills through FUSE.");
  w.Sample("gpucache_written_bytes_total", "", static_cast<double>(written_bytes_.load()));

  w.Family("gpucache_refusals_total", "counter",
           "Requests answered with an error, by errno and the store's reason.");
  for (StatusCode code : kAllStatusCodes) {
    uint64_t n = refusals_[static_cast<size_t>(code)].load(std::memory_order_relaxed);
    if (code == StatusCode::kOk || n == 0) continue;
    const char* name = strerrorname_np(ToErrno(code));
    w.Sample("gpucache_refusals_total", "errno=\"" + std::string(name ? name : "?") +
                 "\",reason=\"" + std::string(ToString(code)) + "\"", double(n));
  }
  w.Family("gpucache_fuse_op_seconds", "histogram", "FUSE operation latency, by operation.");
  for (size_t i = 0; i < kFuseOpCount; ++i) {
    const Histogram& h = ops_[i];
    uint64_t count = h.count.load();
    if (count == 0) continue;
    std::string op = "op=\"" + std::string(ToString(static_cast<FuseOp>(i))) + "\"";
    uint64_t cumulative = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
      cumulative += h.buckets[b].load();
      std::ostringstream le;
      le << kBuckets[b];
      w.Sample("gpucache_fuse_op_seconds_bucket", op + ",le=\"" + le.str() + "\"", double(cumulative));
    }
    w.Sample("gpucache_fuse_op_seconds_bucket", op + ",le=\"+Inf\"", double(count));
    w.Sample("gpucache_fuse_op_seconds_sum", op, double(h.sum_ns.load()) / 1e9);
    w.Sample("gpucache_fuse_op_seconds_count", op, double(count));
  }
  return w.str();
}

}  // namespace gpucache
