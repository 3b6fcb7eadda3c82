// Blocks the engine invalidated on this node whose cold copies are still to be withdrawn
// (docs/cold-tier.md, "Invalidated blocks"). An unlink of a committed block is the engine's
// way to say "this block is wrong"; the hot tier forgets it at once, but its locator in the
// object store still names the same bytes, and a refill would bring them back. Each entry is
// the block and the checksum of the payload it was invalidated with: a refill that would serve
// that payload is refused until the tier's round has deleted the locator naming it.
//
// Bounded: past `capacity` an invalidation is counted as an overflow and its locator stays
// (gpucache_cold_invalidations_overflow_total). Held in memory only: a restart forgets what was not yet
// withdrawn (docs say so). Thread safety: internally locked.
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "store/layout.h"
#include "store/mutex.h"

namespace gpucache::cold {

using PayloadXxh128 = std::array<uint8_t, 16>;  // XXH3-128, as locators and manifests hold it

class PendingInvalidations {
 public:
  using Entry = std::pair<BlockAddress, PayloadXxh128>;
  explicit PendingInvalidations(size_t capacity) : capacity_(capacity) {}

  // False when full (counted in overflow()).
  bool Add(const BlockAddress& a, const PayloadXxh128& checksum);
  // Whether a refill of `a` that would serve the payload with `checksum` must be refused.
  bool Refuses(const BlockAddress& a, const PayloadXxh128& checksum) const;
  std::vector<Entry> Snapshot() const;
  void Remove(const Entry& e);
  size_t size() const;
  uint64_t overflow() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  std::set<Entry> pending_ GUARDED_BY(mu_);
  uint64_t overflow_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpucache::cold
