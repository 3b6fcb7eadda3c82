// Metrics for Prometheus (docs/metrics.md): one registry, exported both as
// `<mountpoint>/.gpucache/metrics` and over HTTP on a loopback port (fs/metrics_http.h).
//
// Store counters are read from StoreStats at scrape time, so they are never kept twice; what only
// the FUSE layer sees (operation latency, bytes read and written) is recorded here with relaxed
// atomics on the hot path.
//
// Thread safety: Record* may be called from any thread; Render is safe concurrently with them.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "store/block_store.h"

namespace gpucache {

enum class FuseOp : uint8_t {
  kLookup, kGetAttr, kSetAttr, kOpen, kRead, kWrite, kCreate, kFlush, kRelease, kRename,
  kUnlink, kMkDir, kReadDir, kGetXattr, kSetXattr, kOther,
};
inline constexpr size_t kFuseOpCount = static_cast<size_t>(FuseOp::kOther) + 1;
std::string_view ToString(FuseOp op);

class Metrics {
 public:
  // Upper bounds of the latency histogram buckets, in seconds.
  static constexpr std::array<double, 12> kBuckets = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05, 0.25, 1.0};

  void RecordOp(FuseOp op, std::chrono::nanoseconds elapsed);
  void RecordRead(uint64_t bytes) { read_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  void RecordWrite(uint64_t bytes) { written_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  // A request answered with an error (every errno the FUSE layer replies, by status).
  void RecordRefusal(StatusCode s) {
    refusals_[static_cast<size_t>(s)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t Refusals(StatusCode s) const { return refusals_[static_cast<size_t>(s)].load(); }

  // The Prometheus text exposition (version 0.0.4). `show_tenant` filters per-tenant series.
  std::string Render(BlockStore& store, const std::function<bool(const std::string&)>& show_tenant);

 private:
  struct Histogram {
    std::array<std::atomic<uint64_t>, kBuckets.size()> buckets{};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> sum_ns{0};
  };
  std::array<Histogram, kFuseOpCount> ops_;
  std::atomic<uint64_t> read_bytes_{0}, written_bytes_{0};
  std::array<std::atomic<uint64_t>, std::size(kAllStatusCodes)> refusals_{};
};

// Times one FUSE operation (RAII): construct at entry, the destructor records.
class OpTimer {
 public:
  OpTimer(Metrics& m, FuseOp op) : m_(m), op_(op), start_(std::chrono::steady_clock::now()) {}
  ~OpTimer() { m_.RecordOp(op_, std::chrono::steady_clock::now() - start_); }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Metrics& m_;
  FuseOp op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gpucache
