// Cold-tier operations (docs/cold-tier.md, "Reclaim and retention", "Key rotation"):
// retention records, reclaim, retired tenants, backfill and reseal.
//
// Reclaim removes one manifest and what only it references, and proves each step:
//   - refused unless the manifest decodes as v4 with every seal verifying, or as unsealed v3
//     (old objects can always be cleaned up); a v1/v2 manifest's references are unknown;
//   - refused while its retention record says to keep it;
//   - refused unless the caller may act for every tenant in it (ownership);
//   - locators are deleted only where they still name this manifest (a newer pack of the same
//     block keeps its locator);
//   - the pack object is deleted only when no other manifest references it, which is proved
//     by reading every manifest; any manifest that cannot be read or decoded as v3 keeps it;
//   - every delete is followed by a HEAD that must answer "not found".
//
// Reseal (key rotation) rewrites sealed manifests and their locators under the keyring's
// current key; see Reseal below and cold/reseal.cc.
//
// Thread safety: const after construction.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cold/digest.h"
#include "cold/invalidations.h"
#include "cold/keyring.h"
#include "cold/locator_locks.h"
#include "cold/object_store.h"
#include "cold/refill.h"
#include "cold/sink.h"
#include "store/block_store.h"

namespace gpucache::cold {

struct ReclaimReport {
  bool refused = false;
  bool absent = false;                // refused because the manifest does not exist
  bool busy = false;                  // refused by `allowed`: its upload is still in progress
  std::string reason;                 // why refused, or why something was kept
  std::vector<std::string> deleted;   // keys deleted and confirmed absent
  std::vector<std::string> kept;      // keys kept, each "key: why"
  std::optional<ObjectError> error;   // the request that stopped the reclaim
};

struct BackfillReport {
  size_t blocks = 0;         // blocks enqueued
  uint64_t bytes = 0;        // their payload bytes
  size_t packs = 0;          // jobs submitted
  size_t packed_blocks = 0;  // blocks in those jobs (the blocks of refused packs are not)
  size_t skipped_cold = 0;   // already had a locator
  size_t skipped_unknown = 0;  // not packed: whether they are cold could not be learned
  size_t invalid_locators = 0;  // listed at a size no readable locator of it has: packed again
  size_t refused = 0;        // packs the sink refused (full, or their object being reclaimed)
  bool budget_reached = false;
  bool stopped = false;      // the daemon began stopping: the blocks after were not looked at
  std::optional<ObjectError> list_error;  // the first listing that failed, if any
};

struct ResealReport {
  size_t manifests_scanned = 0;
  size_t manifests_resealed = 0;   // rewritten under the current key
  size_t manifests_current = 0;    // already under the current key
  size_t locators_resealed = 0;
  size_t locators_current = 0;
  std::vector<std::string> refused;  // "key: why": never re-sealed (unsealed, unknown key, forged)
  uint64_t bytes = 0;                // bytes read and written
  bool budget_reached = false;
  std::string resume_after;          // pass as `after` to continue; "" when the walk finished
  std::optional<ObjectError> error;  // the request that stopped the walk
};

struct PurgeReport {
  bool refused = false;               // the tenant is not retired
  std::string reason;
  size_t manifests_deleted = 0;       // manifests that held only this tenant's blocks
  size_t locators_deleted = 0;        // the tenant's locators (remaining after the manifests)
  std::vector<std::string> deleted;   // every key deleted and confirmed absent
  std::vector<std::string> kept;      // "key: why" (mixed manifests, retention, live packs)
  bool complete = false;              // nothing of the tenant left in the bucket
  std::optional<ObjectError> error;   // the request that stopped the purge
};

struct SweepReport {
  size_t packs_listed = 0;   // objects under packs/ with a pack's key
  size_t referenced = 0;     // named by a manifest
  size_t young = 0;          // named by none, but written less than the minimum age ago (or
                             // of an age the store did not say): an upload may be under way
  size_t busy = 0;           // named by none, but this node's sink holds a job uploading it
  size_t unknown_age = 0;    // named by none, and the store did not say when it was written:
                             // never deleted, and the sweep is then not complete
  uint64_t bytes_deleted = 0;
  std::vector<std::string> deleted;  // pack keys deleted and confirmed absent
  std::vector<std::string> kept;     // "key: why", for the busy ones
  bool more = false;                 // stopped at the request's bound: call again
  bool complete = false;             // no pack object older than the minimum age is orphaned
  std::optional<ObjectError> error;  // the request that stopped the sweep (nothing deleted
                                     // after it; a manifest that cannot be read stops it first)
};

class ColdOps {
 public:
  // `locks`: shared with the Sink that uploads locators, so a reseal's or reclaim's read and
  // write of a locator never straddle the sink's upload of a newer one (cold/locator_locks.h).
  ColdOps(ObjectStore& objects, std::string prefix, std::set<std::string> retired_tenants,
          std::shared_ptr<const SealKeys> keys,
          std::shared_ptr<LocatorLocks> locks = std::make_shared<LocatorLocks>())
      : objects_(objects),
        prefix_(std::move(prefix)),
        retired_(std::move(retired_tenants)),
        keys_(std::move(keys)),
        locks_(std::move(locks)) {}

  bool IsRetired(const std::string& tenant) const { return retired_.count(tenant) > 0; }

  // Keeps the manifest (and what it references) until `retain_until_unix_ns`.
  ObjectResult<Done> RecordRetention(const Sha256& manifest, uint64_t retain_until_unix_ns) const;
  // The retention deadline recorded for `manifest`; 0 if none. Errors other than "absent".
  ObjectResult<uint64_t> RetentionOf(const Sha256& manifest) const;

  // Deletes the manifest and what only it references, once it is checked (sealed, matching
  // its key), `who` owns every tenant it lists (checked before retention: a stranger learns
  // nothing of it) and it is past retention; `allowed` runs then, before the first delete, with
  // the key of the pack object the manifest names, and a reason it returns refuses the reclaim
  // as `busy` ("" to go on).
  ReclaimReport Reclaim(const Sha256& manifest, uint64_t now_unix_ns, const Principal& who,
                        const std::function<std::string(const std::string& object_key)>& allowed = {}) const;

  // Packs committed blocks of the hot store (of `tenant`, or all when empty) that have no
  // locator yet and submits them to `sink`, stopping before `byte_budget` payload bytes.
  // Blocks of retired tenants are skipped. `progress` is told each block enqueued. Once
  // `stopping` (optional) says so, it looks at no other block and waits no longer for room
  // in the sink (`stopped`).
  BackfillReport Backfill(BlockStore& store, Sink& sink, const std::string& tenant,
                          uint64_t byte_budget, const PackOptions& pack,
                          const std::function<void(const BackfillReport&)>& progress = {},
                          const std::function<bool()>& stopping = {}) const;

  // Deletes a retired tenant's objects, at most `max_manifests` manifests per call (each one
  // reclaimed as Reclaim does, with its proofs; a manifest that also lists another tenant's
  // blocks is kept, and the purge is then not complete), then the tenant's remaining locators.
  // Call again until `complete`.
  PurgeReport PurgeTenant(const std::string& tenant, size_t max_manifests,
                          uint64_t now_unix_ns) const;

  // Deletes pack objects that no manifest names (orphans: a job that uploaded its object and
  // then was dropped, failed for good, or died with its daemon) and that were written at least
  // `min_age_s` before `now_unix_s` by the store's clock, at most `max_deletes` per call.
  // Every manifest is read first; one that cannot be read or decoded stops the sweep before
  // anything is deleted (its references are unknown). `claim` runs before each candidate is
  // looked at again: a reason refuses it (counted busy), "" claims it until `release`. Each
  // candidate is then checked again (HEAD: still there and still old; manifests listed since
  // the first reading: still named by none) and deleted, with a HEAD that must say "absent".
  SweepReport SweepOrphans(uint64_t now_unix_s, uint64_t min_age_s, size_t max_deletes,
                           const std::function<std::string(const std::string& object_key)>& claim,
                           const std::function<void(const std::string& object_key)>& release) const;

  // Deletes `a`'s locator if it names the payload with `checksum` (a block invalidated with
  // those bytes; a v1 locator, which names no payload, goes too), reading, deciding and
  // deleting under the key's lock, the delete confirmed by HEAD. A locator naming other bytes
  // (a newer commit's) stays. Whether it deleted one, once no locator naming those bytes is left.
  ObjectResult<bool> WithdrawLocator(const BlockAddress& a, const PayloadXxh128& checksum) const;

  // Walks the manifests (in key order, after `after`) and re-seals every sealed manifest, and
  // every locator that names it, whose seal verifies under a key of the keyring but is not the
  // current one. Objects that do not verify (unsealed, unknown key, forged) are reported and
  // never sealed: a seal vouches for bytes a key holder wrote. Stops at the first manifest
  // after `byte_budget` bytes were read and written; `resume_after` says where to continue.
  ResealReport Reseal(uint64_t byte_budget, const std::string& after = "") const;

  // Reads a committed block through the store's verifying reader and adds it to `builder`,
  // opened for a copy (BlockReads::OpenForCopy): not a use the eviction policy sees.
  static StatusCode AddBlock(BlockStore& store, const BlockAddress& a, PackBuilder& builder);

 private:
  bool DeleteConfirmed(const std::string& key, ReclaimReport& report) const;
  // The keys of `tenant`'s locators and their sizes (one listing), or the error that kept us
  // from knowing.
  ObjectResult<std::map<std::string, uint64_t>> TenantLocators(const std::string& tenant) const;
  // Whether a manifest other than `self` references `object`: none, one does (`why` names
  // it), or it cannot be known (a listing or read failed, a manifest of an older version that
  // names no object: `why` says which).
  enum class Reference { kNone, kReferenced, kUnknown };
  Reference LiveReference(const Sha256& self, const Sha256& object, ReclaimReport& r,
                          std::string& why) const;
  // The objects named by the manifests listed now, skipping those already in `seen` (their
  // keys are added to it); an error when one cannot be read or decoded.
  ObjectResult<std::set<Sha256>> NamedObjects(std::set<std::string>& seen) const;
  void ResealLocators(const Manifest& m, const Sha256& digest, const Keyring& keys,
                      ResealReport& r) const;
  void ResealLocator(const std::string& key, const Sha256& digest, const Keyring& keys,
                     ResealReport& r) const;

  ObjectStore& objects_;
  const std::string prefix_;
  const std::set<std::string> retired_;
  const std::shared_ptr<const SealKeys> keys_;
  const std::shared_ptr<LocatorLocks> locks_;
};

}  // namespace gpucache::cold
