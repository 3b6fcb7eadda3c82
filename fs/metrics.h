// Metrics for Prometheus (docs/metrics.md): one registry, exported both as
// `<mountpoint>/.gpucache/metrics` and over HTTP on a loopback port (fs/metrics_http.h).
//
// Store counters are read from StoreStats at scrape time, so they are never kept twice; what only
// the FUSE layer sees (operation latency, block opens and reads, bytes, refusals) is recorded
// here with relaxed atomics on the hot path. Data directories, backing reads, the I/O buffer
// pool and the process_* metrics are read at scrape time too (fs/metrics_process.cc).
//
// Refusals are labelled with the tenant of the request that was refused: each FUSE operation
// starts an OpTimer (which forgets the last request's tenant on this thread) and the
// filesystem names the tenant once it knows it (NoteTenant), before any refusal.
//
// Thread safety: Record* may be called from any thread; Render is safe concurrently with them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "fs/ram_serving.h"
#include "store/block_store.h"
#include "store/limits.h"
#include "store/medium.h"
#include "store/mutex.h"

namespace gpucache {

class IndexedStore;  // the daemon's wiring helpers below take the concrete store

enum class FuseOp : uint8_t {
  kLookup, kGetAttr, kSetAttr, kOpen, kRead, kWrite, kCreate, kFlush, kRelease, kRename,
  kUnlink, kMkDir, kReadDir, kGetXattr, kSetXattr, kOther,
};
inline constexpr size_t kFuseOpCount = static_cast<size_t>(FuseOp::kOther) + 1;
std::string_view ToString(FuseOp op);

// Which exposition a scrape asked for.
enum class MetricsFormat : uint8_t { kPrometheusText, kOpenMetrics };
// The Content-Type of each.
const char* ContentTypeOf(MetricsFormat format);
// The OpenMetrics 1.0 form of a Prometheus text (0.0.4) exposition: counter families named
// without `_total`, and `# EOF` at the end. The samples are the same.
std::string ToOpenMetrics(const std::string& text);

// Who reads: the tenants whose series are shown, and whether the whole daemon's series (its
// process, FUSE operations, I/O, RAM tier, data directory paths) are (an admin, or the HTTP
// endpoint).
struct MetricsViewer {
  std::function<bool(const std::string&)> show_tenant;
  bool operator_view = false;
};

// The backing I/O in use ("posix ..." or the io_uring reader's status line), for the log.
std::string BackingIoDescription(IndexedStore& store);
// How the store's medium reads block files, with its counters (wiring for Metrics).
MediumIoStats BackingIoStatsOf(IndexedStore& store);

class Metrics {
 public:
  // Upper bounds of the latency histogram buckets, in seconds.
  static constexpr std::array<double, 12> kBuckets = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05, 0.25, 1.0};

  void RecordOp(FuseOp op, std::chrono::nanoseconds elapsed);
  // An open(2) of a committed block (every one reaches the daemon).
  void RecordBlockOpen(const std::string& tenant) { Of(tenant).opens.fetch_add(1, kRelaxed); }
  // A read of a committed block's payload the daemon served (a page-cache hit never comes here).
  // A read that failed with an I/O error is counted by the store (StoreStats::read_errors).
  void RecordBlockRead(const std::string& tenant, uint64_t bytes);
  void RecordWrite(const std::string& tenant, uint64_t bytes) {
    Of(tenant).written_bytes.fetch_add(bytes, kRelaxed);
  }
  // A request answered with an error, counted by status and the tenant NoteTenant named.
  void RecordRefusal(StatusCode s);
  // Total refusals with status `s`, every tenant.
  uint64_t Refusals(StatusCode s) const;
  // A SIGHUP reload's outcome (fs/reload.h): a failed one changed nothing.
  void RecordReload(bool ok) { (ok ? reloads_ok_ : reloads_failed_).fetch_add(1, kRelaxed); }
  // The tenant the current request on this thread is about ("" until named).
  static void NoteTenant(std::string_view tenant);
  // The current request repeats a refusal already counted (the rest of a frame that failed,
  // written again after a short write): RecordRefusal leaves it out.
  static void NoteRepeatedRefusal();
  static bool RepeatedRefusal();
  static void BeginRequest();
  // The tenant NoteTenant named for the current request on this thread ("" if none).
  static const std::string& CurrentTenant();

  std::string Render(BlockAdmin& store, const MetricsViewer& viewer);
  // Where the backing reads' counters come from (set once at start-up by the daemon's wiring;
  // none: no backing reads are known, every series is 0).
  using BackingIoStats = std::function<MediumIoStats()>;
  void SetBackingIoStats(BackingIoStats stats) { backing_io_stats_ = std::move(stats); }
  // The limits in force (the configuration as last reloaded), for gpucache_limit: set once by
  // the Filesystem that owns these metrics.
  using LimitsSource = std::function<ResourceLimits()>;
  void SetLimitsSource(LimitsSource source) { limits_source_ = std::move(source); }
  // The RAM tier's counters (set once at start-up when the tier is on; none: all zero).
  using RamSource = std::function<RamMetrics()>;
  void SetRamSource(RamSource source) { ram_source_ = std::move(source); }

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  BackingIoStats backing_io_stats_;
  LimitsSource limits_source_;
  RamSource ram_source_;
  void RenderLimits(class MetricsWriter& w, const MetricsViewer& viewer);
  struct Histogram {
    std::array<std::atomic<uint64_t>, kBuckets.size()> buckets{};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_ns{0};
  };
  struct TenantIo {
    std::atomic<uint64_t> opens{0}, reads{0}, read_bytes{0}, written_bytes{0};
  };
  TenantIo& Of(const std::string& tenant);
  void RenderIo(class MetricsWriter& w, const MetricsViewer& viewer);
  void RenderRefusals(class MetricsWriter& w, const MetricsViewer& viewer);
  void RenderOps(class MetricsWriter& w);

  std::array<Histogram, kFuseOpCount> ops_;
  std::atomic<uint64_t> reloads_ok_{0}, reloads_failed_{0};
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<TenantIo>, std::less<>> io_ GUARDED_BY(mu_);
  std::map<std::pair<std::string, StatusCode>, uint64_t> refusals_ GUARDED_BY(mu_);
};

// Times one FUSE operation (RAII): construct at entry, the destructor records.
class OpTimer {
 public:
  OpTimer(Metrics& m, FuseOp op) : m_(m), op_(op), start_(std::chrono::steady_clock::now()) {
    Metrics::BeginRequest();
  }
  ~OpTimer() { m_.RecordOp(op_, std::chrono::steady_clock::now() - start_); }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Metrics& m_;
  FuseOp op_;
  std::chrono::steady_clock::time_point start_;
};

// Writes the text exposition (0.0.4): families with HELP and TYPE, then their samples.
class MetricsWriter {
 public:
  void Family(const std::string& name, const char* type, const char* help);
  void Sample(const std::string& name, const std::string& labels, double value);
  std::string str() const { return out_; }

 private:
  std::string out_;
};

// `name="value"` with the value escaped as the exposition formats require.
std::string Label(const char* name, const std::string& value);

// fs/metrics_process.cc: process_*, build info, data directories, backing reads, I/O pool.
void RenderProcessMetrics(MetricsWriter& w);
// fs/metrics_ram.cc: the RAM tier and its passthrough opens (adr/0020).
void RenderRamMetrics(MetricsWriter& w, const RamMetrics& ram);
void RenderBackingMetrics(MetricsWriter& w, BlockAdmin& store, const MediumIoStats& io,
                          bool operator_view);

}  // namespace gpucache
