// StoreAdmin: blocks leaving the namespace (invalidation, eviction, lost devices), pins,
// fences, quarantine and reclaim, drains, counters, limits and observers.
#include "store/store_admin.h"

namespace gpucache {

StatusCode StoreAdmin::Invalidate(const BlockAddress& address) {
  VerifyBeforeUse(address);  // an answer about a block restored unchecked checks it first
  // The payload's checksum lives in the block's header, not in the index: read while the file
  // is still there, and only for an observer (the cold tier) that needs it.
  std::string checksum;
  if (invalidation_observer_) {
    if (Result<BlockInfo> before = Stat(address); before.ok()) checksum = before.value().checksum;
  }
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
  const BlockInfo info = gone.back().info;
  const std::shared_ptr<StoredPayload> stored = gone.back().stored;
  // The kernel made this change itself (unlink). Bytes that stayed under the block's name (a
  // data directory gone read-only) would come back at the next start: the engine hears EIO,
  // not that its invalidation holds (review, 2026-12-07).
  StatusCode stayed = Finish(std::move(gone), std::nullopt);
  // Whatever the disk says below, the block left the index: its cold copy must not come back
  // through a refill either (set once at start-up: no copy needed).
  if (invalidation_observer_) invalidation_observer_(address, checksum);
  // A failed write of the set is counted (metadata errors): see ChangePinAndPersist.
  if (was_pinned) PersistPins();
  if (stayed != StatusCode::kOk) return stayed;
  // Acknowledged only once it holds as a commit would: with sync_commits, after a power cut.
  return medium_->MakeRemovalDurable(info, stored.get());
}

StatusCode StoreAdmin::Evict(const BlockAddress& address) {
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

StatusCode StoreAdmin::SetPinned(const BlockAddress& address, bool pinned) {
  VerifyBeforeUse(address);  // an answer about a block restored unchecked checks it first
  return ChangePinAndPersist(address, pinned);
}

StatusCode StoreAdmin::IsolateDomain(const std::string& path) {
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

Result<uint64_t> StoreAdmin::Fence() { return AdvanceEpoch(); }

Result<uint64_t> StoreCore::AdvanceEpoch(std::optional<uint64_t> from) {
  MutexLock fence_lock(fence_mu_);
  if (from && epoch_.load() != *from) return epoch_.load();  // another fence came first
  if (epoch_.load() >= kLastEpoch) return StatusCode::kTooLarge;  // ids of an earlier epoch
  uint64_t next = epoch_.load() + 1;
  // Persist first: a fence the daemon acknowledged survives a crash.
  if (StatusCode s = medium_->PersistEpoch(next); s != StatusCode::kOk) return s;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  AutomaticFence fence{next - 1, next, 0, RegionIdsPerEpoch()};  // told only when automatic
  AutomaticFenceObserver observer;
  {
    MutexLock lock(mu_);
    epoch_.store(next);
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    auto release = [&](const Reservation& r) NO_THREAD_SAFETY_ANALYSIS {
      admission_.ReservationReleased(r.info.address.tenant, r.credited_bytes);
      admission_.Counters(r.info.address.tenant).fenced++;
      fence.fills_fenced++;
    };
    reservations_.FenceAll(LeaseNowNs(), release, discard);
    if (from) observer = fence_observer_;
  }
  for (auto& p : discard) medium_->Discard(*p);
  if (from) {
    automatic_fences_.fetch_add(1, std::memory_order_relaxed);
    // Nothing else tells the operator why fills hear ESTALE: the daemon logs it.
    if (observer) observer(fence);
  }
  return next;
}

std::vector<QuarantineInfo> StoreAdmin::ListQuarantine() {
  MutexLock lock(mu_);
  return quarantine_.List();
}

Result<QuarantineInfo> StoreAdmin::StatQuarantine(uint64_t region_id) {
  MutexLock lock(mu_);
  std::optional<QuarantineInfo> q = quarantine_.Stat(region_id);
  if (!q) return StatusCode::kNotFound;
  return *q;
}

StatusCode StoreAdmin::ReclaimDrained(uint64_t region_id) {
  QuarantineSet::Entry q;
  {
    MutexLock lock(mu_);
    if (StatusCode s = quarantine_.TakeDrained(region_id, q); s != StatusCode::kOk) return s;
    admission_.Reclaimed(q.info.address.tenant, q.info.size);
  }
  medium_->Drop(q.info, q.stored);
  return StatusCode::kOk;
}

Result<uint64_t> StoreAdmin::ReclaimFenced(uint64_t epoch) {
  std::vector<QuarantineSet::Entry> freed;
  {
    MutexLock lock(mu_);
    if (epoch != epoch_.load()) return StatusCode::kFenced;
    freed = quarantine_.TakeBefore(epoch);
    for (const QuarantineSet::Entry& q : freed) admission_.Reclaimed(q.info.address.tenant, q.info.size);
  }
  for (QuarantineSet::Entry& q : freed) medium_->Drop(q.info, q.stored);
  return uint64_t{freed.size()};
}

StatusCode StoreAdmin::Drain(DrainAction action) {
  // One finish at a time: a finish whose fence failed must not undo one that succeeded.
  MutexLock finishing(drain_mu_);
  bool finished_before = false;
  {
    MutexLock lock(mu_);
    switch (action) {
      case DrainAction::kStart:
        admission_.SetDraining(true);
        return StatusCode::kOk;
      case DrainAction::kRollback:
        if (!admission_.draining() || drain_finished_) return StatusCode::kInvalidArgument;
        admission_.SetDraining(false);
        return StatusCode::kOk;
      case DrainAction::kFinish:
        if (!admission_.draining()) return StatusCode::kInvalidArgument;
        finished_before = drain_finished_;
        drain_finished_ = true;
        break;
    }
  }
  Result<uint64_t> fenced = Fence();
  if (fenced.ok()) return StatusCode::kOk;
  // Not finished: the epoch was not persisted (a full or failing data directory). The drain
  // stays in progress, so it may be finished again or rolled back; marked finished, neither
  // was possible and new fills stayed refused (review, 2026-12-07).
  MutexLock lock(mu_);
  drain_finished_ = finished_before;  // an earlier finish's fence still holds
  return fenced.status();
}

uint64_t StoreAdmin::Epoch() { return epoch_.load(); }

StoreStats StoreAdmin::Stats() {
  MutexLock lock(mu_);
  StoreStats stats{epoch_.load(), admission_.draining(), medium_->errors(), unverified_.size(),
                   walking_.load() || !walk_done_.load(), admission_.counters()};
  stats.metadata_errors = medium_->metadata_errors();
  stats.automatic_fences = automatic_fences_.load(std::memory_order_relaxed);
  stats.read_errors = read_errors_.load(std::memory_order_relaxed);
  stats.files_missing = files_missing_.load(std::memory_order_relaxed);
  return stats;
}

std::vector<DomainInfo> StoreAdmin::Domains() { return medium_->Domains(); }

void StoreAdmin::SetLimits(ResourceLimits limits) {
  MutexLock lock(mu_);
  options_.limits = std::move(limits);  // admission_ holds a reference to it
}

void StoreAdmin::SetRemovalObserver(RemovalObserver observer) {
  MutexLock lock(mu_);
  observer_ = std::move(observer);
}

void StoreAdmin::SetAutomaticFenceObserver(AutomaticFenceObserver observer) {
  MutexLock lock(mu_);
  fence_observer_ = std::move(observer);
}

void StoreAdmin::SetBackingReadErrorObserver(BackingReadErrorObserver observer) {
  MutexLock lock(mu_);
  read_error_observer_ = std::move(observer);
}

}  // namespace gpucache
