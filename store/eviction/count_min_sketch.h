// A count-min sketch of 4-bit counters with periodic halving (TinyLFU's frequency estimate,
// as in Caffeine's FrequencySketch): a few bits per block, and old popularity fades.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpucache {

class CountMinSketch {
 public:
  // `expected`: about how many distinct keys matter (the cache capacity in blocks).
  void Resize(uint64_t expected) {
    uint64_t width = 16;
    while (width < expected * 2) width <<= 1;  // about two counters per key and row
    counters_.assign(width * kDepth, 0);
    mask_ = width - 1;
    sample_ = std::max<uint64_t>(10 * expected, 64);
    additions_ = 0;
  }
  uint32_t Estimate(uint64_t key) const {
    uint32_t m = 15;
    for (int d = 0; d < kDepth; ++d) m = std::min<uint32_t>(m, counters_[Index(key, d)]);
    return m;
  }
  void Increment(uint64_t key) {
    if (counters_.empty()) Resize(1024);
    uint32_t m = Estimate(key);
    if (m >= 15) return;
    for (int d = 0; d < kDepth; ++d) {
      uint8_t& c = counters_[Index(key, d)];
      if (c == m) ++c;  // conservative update: only the minimum counters grow
    }
    if (++additions_ >= sample_) Age();
  }

 private:
  static constexpr int kDepth = 4;
  void Age() {
    for (uint8_t& c : counters_) c >>= 1;
    additions_ /= 2;
  }
  size_t Index(uint64_t key, int d) const {
    uint64_t h = key * (0x9E3779B97F4A7C15ull + 2 * static_cast<uint64_t>(d)) + d;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return static_cast<size_t>(d) * (mask_ + 1) + (h & mask_);
  }
  std::vector<uint8_t> counters_;
  uint64_t mask_ = 0, sample_ = 0, additions_ = 0;
};

}  // namespace gpucache
