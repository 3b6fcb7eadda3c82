// The prefix tree of resident blocks, as prefix-lru and prefix-reuse keep it: per slot its
// parent, its newest child and its next sibling (12 bytes). A parent's children form a ring
// through the next-sibling links, oldest first, closed from the newest back to the oldest, so
// a child joins at the end and the oldest leaves with no walk; another walks the ring to the
// child before it (no back link: 4 bytes less a block). A block that leaves before its children
// orphans them (its slot may be reused at once by an unrelated block), in time proportional to
// its children.
#pragma once

#include <cstddef>
#include <vector>

#include "store/eviction/eviction_policy.h"

namespace gpucache {

class ChildRing {
 public:
  static constexpr Slot kNone = static_cast<Slot>(-1);

  void Reserve(size_t slots) {
    for (auto* v : {&parent_, &last_child_, &next_sibling_}) v->reserve(slots);
  }
  void Resize(size_t n) {
    for (auto* v : {&parent_, &last_child_, &next_sibling_}) v->resize(n, kNone);
  }
  // `slot` joins as `parent`'s newest child (kNone: a root), with no children of its own.
  void Attach(Slot slot, Slot parent) {
    parent_[slot] = parent;
    last_child_[slot] = kNone;
    if (parent == kNone) return;
    Slot last = last_child_[parent];
    next_sibling_[slot] = last == kNone ? slot : next_sibling_[last];  // the ring's oldest
    if (last != kNone) next_sibling_[last] = slot;
    last_child_[parent] = slot;
  }
  // `slot` leaves the tree: its children become roots, and it leaves its parent's ring.
  void Detach(Slot slot) {
    if (Slot last = last_child_[slot]; last != kNone) {
      Slot c = last;
      do {
        c = next_sibling_[c];
        parent_[c] = kNone;
      } while (c != last);
      last_child_[slot] = kNone;
    }
    if (Slot p = parent_[slot]; p != kNone) {
      Slot before = last_child_[p];
      while (next_sibling_[before] != slot) before = next_sibling_[before];
      if (before == slot) {
        last_child_[p] = kNone;  // its only child
      } else {
        next_sibling_[before] = next_sibling_[slot];
        if (last_child_[p] == slot) last_child_[p] = before;
      }
      parent_[slot] = kNone;
    }
  }
  bool HasChildren(Slot slot) const { return last_child_[slot] != kNone; }
  Slot newest_child(Slot slot) const { return last_child_[slot]; }
  // In the ring: the newest child's next sibling is the oldest.
  Slot next_sibling(Slot slot) const { return next_sibling_[slot]; }

 private:
  std::vector<Slot> parent_, last_child_, next_sibling_;
};

}  // namespace gpucache
