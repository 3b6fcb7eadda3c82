// IndexedStore: operations (fence, quarantine and reclaim, drain, reservation leases),
// counters, and start-up restoration.
#include "store/indexed_store.h"

namespace gpucache {

Result<uint64_t> IndexedStore::Fence() {
  MutexLock fence_lock(fence_mu_);
  uint64_t next = epoch_.load() + 1;
  // Persist first: a fence the daemon acknowledged survives a crash.
  if (StatusCode s = medium_->PersistEpoch(next); s != StatusCode::kOk) return s;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  {
    MutexLock lock(mu_);
    epoch_.store(next);
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    auto release = [&](const Reservation& r) NO_THREAD_SAFETY_ANALYSIS {
      admission_.ReservationReleased(r.info.address.tenant, r.info.size);
      admission_.Counters(r.info.address.tenant).fenced++;
    };
    reservations_.FenceAll(NowNs(), release, discard);
  }
  for (auto& p : discard) medium_->Discard(*p);
  return next;
}

std::vector<QuarantineInfo> IndexedStore::ListQuarantine() {
  MutexLock lock(mu_);
  return quarantine_.List();
}

Result<QuarantineInfo> IndexedStore::StatQuarantine(uint64_t region_id) {
  MutexLock lock(mu_);
  std::optional<QuarantineInfo> q = quarantine_.Stat(region_id);
  if (!q) return StatusCode::kNotFound;
  return *q;
}

StatusCode IndexedStore::ReclaimDrained(uint64_t region_id) {
  QuarantineSet::Entry q;
  {
    MutexLock lock(mu_);
    if (StatusCode s = quarantine_.TakeDrained(region_id, q); s != StatusCode::kOk) return s;
    admission_.Reclaimed(q.info.address.tenant, q.info.size);
  }
  medium_->Drop(q.info, q.stored);
  return StatusCode::kOk;
}

Result<uint64_t> IndexedStore::ReclaimFenced(uint64_t epoch) {
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

StatusCode IndexedStore::Drain(DrainAction action) {
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
        drain_finished_ = true;
        break;
    }
  }
  Result<uint64_t> fenced = Fence();
  return fenced.ok() ? StatusCode::kOk : fenced.status();
}

std::optional<FillState> IndexedStore::FillOutcome(const BlockAddress& address) {
  MutexLock lock(mu_);
  return reservations_.Outcome(address);
}

bool IndexedStore::RecentlyFenced(const BlockAddress& address, uint64_t now_ns) {
  MutexLock lock(mu_);
  return reservations_.RecentlyFenced(address, now_ns, options_.reservation_lease_ns);
}

size_t IndexedStore::ExpireReservations(uint64_t now_ns) {
  std::vector<std::shared_ptr<PendingPayload>> discard;
  size_t expired;
  {
    MutexLock lock(mu_);
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    auto release = [&](const Reservation& r) NO_THREAD_SAFETY_ANALYSIS {
      admission_.ReservationReleased(r.info.address.tenant, r.info.size);
      admission_.Counters(r.info.address.tenant).expired++;
    };
    expired = reservations_.ExpireIdle(now_ns, options_.reservation_lease_ns, release, discard);
  }
  for (auto& p : discard) medium_->Discard(*p);
  return expired;
}

uint64_t IndexedStore::Epoch() { return epoch_.load(); }

StoreStats IndexedStore::Stats() {
  MutexLock lock(mu_);
  StoreStats stats{epoch_.load(), admission_.draining(), medium_->errors(), unverified_.size(),
                   walking_.load() || !walk_done_.load(), admission_.counters()};
  return stats;
}

std::vector<DomainInfo> IndexedStore::Domains() { return medium_->Domains(); }

void IndexedStore::SetLimits(ResourceLimits limits) {
  MutexLock lock(mu_);
  options_.limits = std::move(limits);  // admission_ holds a reference to it
}

void IndexedStore::SetRemovalObserver(RemovalObserver observer) {
  MutexLock lock(mu_);
  observer_ = std::move(observer);
}

size_t IndexedStore::Restore(const Found& part) {
  MutexLock lock(mu_);  // once a part: a start restores millions
  if (part.expected_blocks != 0) {
    index_.Reserve(part.expected_blocks);
    admission_.Reserve(index_.size() + part.expected_blocks);  // ids are dense: below that many
  }
  for (const Found::Namespace& n : part.namespaces) index_.namespaces().Add(n.tenant, n.ns, n.owner);
  size_t restored = 0;
  for (size_t i = 0; i < part.count; ++i) {
    const IndexedBlock& b = part.blocks[i];
    // Blocks handed over unverified come straight from INDEX's entries, one per address.
    std::optional<BlockId> id = IndexLocked(b, part.stored, /*known_new=*/part.unverified);
    if (!id) continue;  // the medium hands over each block once: not reached
    if (part.unverified) unverified_.Add(*id);
    restored++;
  }
  if (part.unverified && restored != 0) walking_.store(true, std::memory_order_release);
  for (const Found::Quarantined& q : part.quarantined) {
    BlockInfo info = q.info;
    MustTransition(info.state, BlockState::kEvicting);
    uint64_t size = info.size;
    std::string tenant = info.address.tenant;
    if (quarantine_.Add({std::move(info), q.stored, 0, "restart", 0})) admission_.Quarantined(tenant, size);
  }
  return restored;
}

std::shared_ptr<StoredPayload> IndexedStore::StoredAt(const BlockAddress& address) {
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  return id ? index_.StoredOf(*id) : nullptr;
}

std::string IndexedStore::BackingPath(const BlockAddress& address) {
  return medium_->PathOf(address, StoredAt(address).get());
}

}  // namespace gpucache
