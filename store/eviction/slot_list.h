// SlotList: an intrusive doubly-linked list of policy slots (store/eviction/eviction_policy.h),
// its links in two flat arrays indexed by slot: 8 bytes a slot, no node per block.
//
// Thread safety: none; the owning policy's caller serializes.
#pragma once

#include <cstdint>
#include <vector>

#include "store/eviction/eviction_policy.h"

namespace gpucache {

class SlotList {
 public:
  static constexpr Slot kNone = ~Slot{0};

  bool Contains(Slot s) const { return s < prev_.size() && prev_[s] != kOut; }
  Slot front() const { return head_; }
  Slot back() const { return tail_; }
  Slot next(Slot s) const { return next_[s]; }
  Slot prev(Slot s) const { return prev_[s]; }
  // REQUIRES: !Contains(s).
  void PushBack(Slot s) {
    Grow(s);
    prev_[s] = tail_;
    next_[s] = kNone;
    (tail_ == kNone ? head_ : next_[tail_]) = s;
    tail_ = s;
  }
  // REQUIRES: !Contains(s) and Contains(before).
  void InsertBefore(Slot s, Slot before) {
    Grow(s);
    prev_[s] = prev_[before];
    next_[s] = before;
    (prev_[before] == kNone ? head_ : next_[prev_[before]]) = s;
    prev_[before] = s;
  }
  // REQUIRES: !Contains(s) and `after` is kNone (s goes first) or Contains(after).
  void InsertAfter(Slot s, Slot after) {
    if (after == kNone) {
      Grow(s);
      prev_[s] = kNone;
      next_[s] = head_;
      (head_ == kNone ? tail_ : prev_[head_]) = s;
      head_ = s;
      return;
    }
    if (next_[after] == kNone) return PushBack(s);
    InsertBefore(s, next_[after]);
  }
  void Remove(Slot s) {
    if (!Contains(s)) return;
    (prev_[s] == kNone ? head_ : next_[prev_[s]]) = next_[s];
    (next_[s] == kNone ? tail_ : prev_[next_[s]]) = prev_[s];
    prev_[s] = kOut;
  }
  void MoveToBack(Slot s) {
    Remove(s);
    PushBack(s);
  }
  // The first slot from the front that `accept` takes, or kNone.
  template <class Accept>
  Slot FirstWhere(const Accept& accept) const {
    return FirstWhereIn(head_, kNone, accept);
  }
  // The first slot in [from, to) (to: a later slot, or kNone for the end) `accept` takes.
  template <class Accept>
  Slot FirstWhereIn(Slot from, Slot to, const Accept& accept) const {
    for (Slot s = from; s != to; s = next_[s]) {
      if (accept(s)) return s;
    }
    return kNone;
  }
  // Room for slots below `slots` without growing.
  void Reserve(size_t slots) {
    prev_.reserve(slots);
    next_.reserve(slots);
  }
  size_t MemoryBytes() const { return (prev_.capacity() + next_.capacity()) * sizeof(Slot); }

 private:
  static constexpr Slot kOut = kNone - 1;  // prev_ of a slot not in the list
  void Grow(Slot s) {
    if (s < prev_.size()) return;
    prev_.resize(size_t{s} + 1, kOut);
    next_.resize(size_t{s} + 1, kNone);
  }
  std::vector<Slot> prev_, next_;
  Slot head_ = kNone, tail_ = kNone;
};

}  // namespace gpucache
