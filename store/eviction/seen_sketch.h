// SeenSketch: about how many times a key came in lately (0..15), after the block itself left.
// A count-min sketch of 4-bit counters, two rows, packed sixteen to a word; every `window`
// additions all counters halve, so a key not seen for a few windows reads 0 again. It is what
// lets prefix-reuse tell a block that returns (its conversation came back after it was
// evicted) from a block never seen before.
//
// Thread safety: none; the owning policy's caller serializes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpucache {

class SeenSketch {
 public:
  static constexpr uint64_t kUnsizedKeys = 1024;  // until the owner knows how many to expect
  // About `keys` distinct keys per window: counters for twice that in each row.
  void Resize(uint64_t keys) {
    uint64_t width = 64;
    while (width < 2 * keys) width <<= 1;
    words_.assign(2 * width / 16, 0);
    mask_ = width - 1;
    window_ = std::max<uint64_t>(keys, 64);
    additions_ = 0;
  }
  uint32_t Estimate(uint64_t key) const {
    if (words_.empty()) return 0;
    return std::min(Get(0, key), Get(1, key));
  }
  // Counts one more coming of `key` (conservative update: only the smaller counters grow).
  void Add(uint64_t key) {
    if (words_.empty()) Resize(kUnsizedKeys);
    uint32_t m = Estimate(key);
    if (m < 15) {
      for (int row = 0; row < 2; ++row) {
        if (Get(row, key) == m) Set(row, key, m + 1);
      }
    }
    if (++additions_ >= window_) Halve();
  }
  size_t MemoryBytes() const { return words_.capacity() * sizeof(uint64_t); }

 private:
  size_t Index(int row, uint64_t key) const {
    uint64_t h = key + (row ? 0xC2B2AE3D27D4EB4Full : 0x9E3779B97F4A7C15ull);  // splitmix64
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return static_cast<size_t>(row) * (mask_ + 1) + (h & mask_);
  }
  uint32_t Get(int row, uint64_t key) const {
    size_t i = Index(row, key);
    return static_cast<uint32_t>(words_[i / 16] >> (4 * (i % 16))) & 15;
  }
  void Set(int row, uint64_t key, uint32_t v) {
    size_t i = Index(row, key);
    uint64_t& w = words_[i / 16];
    w = (w & ~(uint64_t{15} << (4 * (i % 16)))) | (uint64_t{v} << (4 * (i % 16)));
  }
  void Halve() {
    for (uint64_t& w : words_) w = (w >> 1) & 0x7777777777777777ull;
    additions_ = 0;
  }
  std::vector<uint64_t> words_;
  uint64_t mask_ = 0, window_ = 0, additions_ = 0;
};

}  // namespace gpucache
