// Known places: where this node knows a block's payload to be in the object store, so a refill
// can be one range GET instead of a locator GET then a range GET (docs/cold-tier.md,
// "Known places"; adr/0015-known-places-refill.md).
//
// A place is learned only from values this node trusts: the entries of a pack its own sink
// uploaded (it computed them), or a sealed locator whose seal verified and whose payload then
// matched it in a refill. A place is a hint about *where*, never a reason to accept bytes: a
// refill through it checks exactly what the two-GET refill checks (exact length, XXH3-128), so
// a stale place costs a failed GET and a fallback, never a wrong byte. Keyed by the block's
// full address (tenant, namespace, block): one tenant's place is never another's.
//
// Bounded (`capacity` places, least recently used dropped first; 0 turns it off). Forgotten:
// on a failed fetch through it, on this node's reclaim of the manifest that listed it, on a
// tenant purge.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "cold/digest.h"
#include "cold/refill.h"
#include "store/layout.h"
#include "store/mutex.h"

namespace gpucache::cold {

struct KnownPlace {
  PayloadRange range;         // the pack, the payload's range, its XXH3-128 and identity digest
  Sha256 manifest_digest{};   // the manifest that listed it (reclaiming it forgets the place)
};

class KnownPlaces {
 public:
  explicit KnownPlaces(size_t capacity) : capacity_(capacity) {}

  // Remembers (or replaces) the block's place; the least recently used goes when full.
  void Remember(const BlockAddress& a, const KnownPlace& place);
  // The block's place, if known (and marks it recently used).
  std::optional<KnownPlace> Find(const BlockAddress& a);
  void Forget(const BlockAddress& a);
  // Forgets every place listed by `manifest`; how many.
  size_t ForgetManifest(const Sha256& manifest);
  // Forgets every place of `tenant`; how many.
  size_t ForgetTenant(const std::string& tenant);
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::string tenant;
    KnownPlace place;
    std::list<const std::string*>::iterator lru;  // its key in `lru_` (front: most recent)
  };
  using Map = std::unordered_map<std::string, Entry>;
  static std::string KeyOf(const BlockAddress& a);
  void Erase(Map::iterator it) REQUIRES(mu_);
  template <typename Pred>
  size_t ForgetWhere(Pred pred);

  const size_t capacity_;
  mutable Mutex mu_;
  Map places_ GUARDED_BY(mu_);
  std::list<const std::string*> lru_ GUARDED_BY(mu_);  // keys of places_ (node keys are stable)
};

}  // namespace gpucache::cold
