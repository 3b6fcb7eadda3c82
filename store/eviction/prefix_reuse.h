// prefix-reuse: evicts the block least likely to be used again soon, as learned online.
//
// Every block belongs to one of a few dozen classes, named by what the cache can see when it
// comes or is used (docs/eviction.md, "prefix-reuse"):
//   - a partial block (a prompt's tail: only a request with exactly those tokens reuses it);
//   - a block seen before (used while resident, or come back after it was evicted: SeenSketch):
//     by how often, 1, 2, 3 or more;
//   - a new block: by where its chain grew (the end of a chain, a branch off a block with a few
//     children, or off a hub with many, such as a shared system prompt), by how many new blocks
//     the request added before it (1, up to 7, more), and by how often the block it grew from
//     was used (0..3).
// For each class the policy learns P, the chance that a block of the class is used again within
// tau events (but within half the mean age at which blocks are evicted, if that is shorter: a
// later reuse would be a miss in a cache this size), from sampled blocks it follows through eviction and back (a ghost table), with
// counts that fade so that the estimate follows the workload. tau itself is learned: the mean
// time a new block takes to be used again (its first reuse), among those that come back within
// 4 tau. The clock counts events (blocks committed and opened), so ages are in units of cache
// traffic, and the same trace gives the same decisions in process and through a mount.
//
// A block's score is log P(class) - age / tau (its age: events since it was last used or
// committed): P decays exponentially in the time since the chain was last extended or used,
// so a chain likely to continue keeps its blocks longer and one that went quiet goes. The
// victim is the leaf (no resident children) with the lowest score among eligible blocks; new
// blocks are on probation, not evicted while younger than 1/20 of the age blocks are usually
// evicted at (so a request's chain is not evicted while it is being committed); ancestors go
// only when no leaf is eligible.
//
// Cost: per class a recency list (a block's class only changes when it is used, and it then
// goes last in its new list, so each list is in age order and its first eligible leaf is its
// best candidate): a victim is the best of ~40 list heads, O(classes) plus the walk past
// non-leaves and refused blocks that prefix-lru also makes. Per block: the list links (8 B),
// the parent/child ring of prefix-lru (12 B), the time of its last use (2 B: a coarse clock,
// ticks of about 1/1024 of the capacity) and its features (2 B), plus the sketch (about 2 B a
// block) and the ghosts of sampled blocks (1 in 16).
#pragma once

#include <memory>

#include "store/eviction/eviction_policy.h"

namespace gpucache {

std::unique_ptr<EvictionPolicy> MakePrefixReusePolicy();

}  // namespace gpucache
