// IndexedStore: blocks leaving the namespace (invalidation, eviction, corruption, lost
// devices), pins, and walks over the committed blocks.
#include "store/indexed_store.h"

namespace gpucache {

// --- Leaving the namespace ---------------------------------------------------------------

StatusCode IndexedStore::Invalidate(const BlockAddress& address) {
  VerifyBeforeUse(address);  // an answer about a block restored unchecked checks it first
  std::vector<Departure> gone;
  bool was_pinned;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) return StatusCode::kNotFound;
    was_pinned = index_.at(*id).pinned;
    admission_.Counters(address.tenant).invalidations++;
    gone.push_back(RemoveLocked(*id, "invalidated"));
  }
  Finish(std::move(gone), std::nullopt);  // the kernel made this change itself (unlink)
  if (was_pinned) PersistPins();
  return StatusCode::kOk;
}

StatusCode IndexedStore::Evict(const BlockAddress& address) {
  VerifyBeforeUse(address);  // an answer about a block restored unchecked checks it first
  std::vector<Departure> gone;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) return StatusCode::kNotFound;
    if (index_.at(*id).pinned) return StatusCode::kBusy;
    admission_.Counters(address.tenant).evictions++;
    gone.push_back(RemoveLocked(*id, "evicted"));
  }
  Finish(std::move(gone), RemovalReason::kEvicted);
  return StatusCode::kOk;
}

StatusCode IndexedStore::SetPinned(const BlockAddress& address, bool pinned) {
  VerifyBeforeUse(address);  // an answer about a block restored unchecked checks it first
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) return StatusCode::kNotFound;
    if (index_.at(*id).pinned == pinned) return StatusCode::kOk;
    index_.at(*id).pinned = pinned;
  }
  PersistPins();
  return StatusCode::kOk;
}

void IndexedStore::PersistPins() {
  std::vector<BlockAddress> pinned;
  {
    MutexLock lock(mu_);
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    index_.ForEach([&](BlockId id) NO_THREAD_SAFETY_ANALYSIS {
      if (index_.at(id).pinned) pinned.push_back(index_.AddressOf(id));
    });
  }
  medium_->PersistPins(pinned);
}

StatusCode IndexedStore::IsolateDomain(const std::string& path) {
  Medium::StoredTest lost;
  StatusCode s = medium_->IsolateDomain(path, lost);
  if (s != StatusCode::kOk || !lost) return s;
  // The blocks stored there are forgotten, their bytes untouched: the device is out of service.
  std::vector<BlockAddress> gone;
  RemovalObserver observer;
  {
    MutexLock lock(mu_);
    std::vector<BlockId> ids;
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    index_.ForEach([&](BlockId id) NO_THREAD_SAFETY_ANALYSIS {
      if (lost(index_.StoredOf(id).get())) ids.push_back(id);
    });
    for (BlockId id : ids) {
      // The device took the bytes with it: nothing is left to drop or keep.
      gone.push_back(index_.AddressOf(id));
      ForgetLocked(id);
    }
    observer = observer_;
  }
  if (observer) {
    for (const BlockAddress& a : gone) observer(a, RemovalReason::kLost, {});
  }
  return s;
}

BlockLister IndexedStore::Lister() {
  return [this](const BlockVisitor& visit) {
    MutexLock lock(mu_);
    IndexedBlock b;
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    index_.ForEach([&](BlockId id) NO_THREAD_SAFETY_ANALYSIS {
      const Record& r = index_.at(id);
      b.address = index_.AddressOf(id);
      b.size = r.size;
      b.commit_epoch = index_.CommitEpochOf(id);
      b.region_id = r.region_id;
      b.owner = index_.BlockOwner(id);
      b.commit_time_ns = r.commit_time_ns;
      b.keys = index_.KeysOf(id);
      b.pinned = r.pinned;
      visit(b, index_.StoredOf(id).get());
    });
  };
}

void IndexedStore::FoldJournalIfDue() {
  if (medium_->upkeep().JournalFoldDue()) medium_->upkeep().FoldJournal(Lister());
}

void IndexedStore::ReportCorrupt(const BlockAddress& address, uint64_t region_id, std::string what) {
  std::vector<Departure> gone;
  bool was_pinned;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    // Already gone: another read (the kernel retries a failed page) found it first. One
    // corrupt block counts once.
    if (!id || index_.at(*id).region_id != region_id) return;
    was_pinned = index_.at(*id).pinned;
    admission_.Counters(address.tenant).checksum_failures++;
    gone.push_back(DepartLocked(*id, false));  // wrong bytes are never served again
    gone.back().damage = std::move(what);
  }
  Finish(std::move(gone), RemovalReason::kCorrupt);
  // The pin leaves with the block: a stale entry in the persisted pins would pin whatever is
  // committed at that path next, from the next restart on (found by the reliability suite's
  // model tester, tests/reliability/model_test.cc).
  if (was_pinned) PersistPins();
}

}  // namespace gpucache
