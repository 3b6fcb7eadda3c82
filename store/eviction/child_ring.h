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
  // How to undo a Detach (Reattach): where `slot` was in its parent's ring, and its children.
  struct Detached {
    Slot slot = kNone, parent = kNone;
    Slot before = kNone;        // the sibling before it in the ring (itself: the only child)
    bool was_newest = false;    // it was its parent's newest child
    Slot newest_child = kNone;  // its own newest child (kNone: it was a leaf)
  };
  // `slot` leaves the tree: its children become roots, and it leaves its parent's ring.
  Detached Detach(Slot slot) {
    Detached d{.slot = slot, .parent = parent_[slot], .newest_child = last_child_[slot]};
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
      d.before = before;
      d.was_newest = last_child_[p] == slot;
      if (before == slot) {
        last_child_[p] = kNone;  // its only child
      } else {
        next_sibling_[before] = next_sibling_[slot];
        if (last_child_[p] == slot) last_child_[p] = before;
      }
      parent_[slot] = kNone;
    }
    return d;
  }
  // Undoes a Detach, in the same place of the ring and with the same children. REQUIRES: the
  // tree is as that Detach left it (Detaches since are undone first, and nothing was attached:
  // the children's ring links, which Detach leaves alone, are intact).
  void Reattach(const Detached& d) {
    if (d.newest_child != kNone) {
      last_child_[d.slot] = d.newest_child;
      Slot c = d.newest_child;
      do {
        c = next_sibling_[c];
        parent_[c] = d.slot;
      } while (c != d.newest_child);
    }
    parent_[d.slot] = d.parent;
    if (d.parent == kNone) return;
    if (d.before == d.slot) {
      next_sibling_[d.slot] = d.slot;
      last_child_[d.parent] = d.slot;
      return;
    }
    next_sibling_[d.slot] = next_sibling_[d.before];
    next_sibling_[d.before] = d.slot;
    if (d.was_newest) last_child_[d.parent] = d.slot;
  }
  // `slot`, a root, joins as `parent`'s newest child, with the children it has.
  void Adopt(Slot slot, Slot parent) {
    Slot children = last_child_[slot];
    Attach(slot, parent);
    last_child_[slot] = children;
  }
  Slot parent(Slot slot) const { return parent_[slot]; }
  bool HasChildren(Slot slot) const { return last_child_[slot] != kNone; }
  Slot newest_child(Slot slot) const { return last_child_[slot]; }
  // In the ring: the newest child's next sibling is the oldest.
  Slot next_sibling(Slot slot) const { return next_sibling_[slot]; }

 private:
  std::vector<Slot> parent_, last_child_, next_sibling_;
};

// Empties a policy's list of blocks set aside (EvictionPolicy::SetAside, with the ChildRing
// records that undo them); one that a large eviction grew is not kept at that size.
template <class T>
void ClearAside(std::vector<T>& aside) {
  aside.clear();
  if (aside.capacity() > 4096) std::vector<T>().swap(aside);
}

}  // namespace gpucache
