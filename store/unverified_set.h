// UnverifiedSet: the blocks a start restored without checking their files (adr/0016), by
// BlockIndex id: a bit each while the start's background walk runs, freed when it finishes.
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpucache {

class UnverifiedSet {
 public:
  bool Contains(uint32_t id) const { return id < bits_.size() && bits_[id]; }
  void Add(uint32_t id) {
    if (id >= bits_.size()) bits_.resize(id + 1);
    if (!bits_[id]) count_++;
    bits_[id] = true;
  }
  // The block was checked (or left before it was).
  void Remove(uint32_t id) {
    if (!Contains(id)) return;
    bits_[id] = false;
    count_--;
  }
  size_t size() const { return count_; }
  // Calls `visit(id)` for every block still unchecked, in id order.
  template <class Visit>
  void ForEach(const Visit& visit) const {
    for (uint32_t id = 0; id < bits_.size(); ++id) {
      if (bits_[id]) visit(id);
    }
  }
  // Every bit goes, and its memory with it.
  void Clear() {
    std::vector<bool>().swap(bits_);
    count_ = 0;
  }

 private:
  std::vector<bool> bits_;
  size_t count_ = 0;
};

}  // namespace gpucache
