// IndexedStore: operations (fence, quarantine and reclaim, drain, reservation leases),
// counters, and start-up restoration.
#include <time.h>

#include "store/indexed_store.h"

namespace gpucache {

Result<uint64_t> IndexedStore::Fence() {
  std::lock_guard fence_lock(fence_mu_);
  uint64_t next = epoch_.load() + 1;
  // Persist first: a fence the daemon acknowledged survives a crash.
  if (StatusCode s = medium_->PersistEpoch(next); s != StatusCode::kOk) return s;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  {
    std::lock_guard lock(mu_);
    epoch_.store(next);
    for (auto it = reservations_.begin(); it != reservations_.end();) {
      Reservation& r = it->second;
      if (r.fenced) {
        ++it;
        continue;
      }
      ReleaseCreditsLocked(r);
      RecordOutcomeLocked(r.info.address, FillState::kFenced);
      CountersLocked(r.info.address.tenant).fenced++;
      r.fenced = true;
      if (r.writers == 0 && r.writes_inflight == 0 && !r.sealing) {
        if (r.payload) discard.push_back(std::move(r.payload));
        it = reservations_.erase(it);
      } else {
        ++it;  // removed when its last writer lets go (CloseWriter) or its commit ends
      }
    }
  }
  for (auto& p : discard) medium_->Discard(*p);
  return next;
}

std::vector<QuarantineInfo> IndexedStore::ListQuarantine() {
  std::lock_guard lock(mu_);
  std::vector<QuarantineInfo> out;
  for (const auto& [region, q] : quarantine_) {
    out.push_back({region, q.info.address, q.info.size, q.reason, q.since_epoch, q.open_readers});
  }
  return out;
}

Result<QuarantineInfo> IndexedStore::StatQuarantine(uint64_t region_id) {
  std::lock_guard lock(mu_);
  auto it = quarantine_.find(region_id);
  if (it == quarantine_.end()) return StatusCode::kNotFound;
  const Quarantined& q = it->second;
  return QuarantineInfo{region_id, q.info.address, q.info.size, q.reason, q.since_epoch, q.open_readers};
}

StatusCode IndexedStore::ReclaimDrained(uint64_t region_id) {
  Quarantined q;
  {
    std::lock_guard lock(mu_);
    auto it = quarantine_.find(region_id);
    if (it == quarantine_.end()) return StatusCode::kNotFound;
    if (it->second.open_readers > 0) return StatusCode::kBusy;  // we still see a handle
    q = std::move(it->second);
    quarantine_.erase(it);
    TenantCounters& c = CountersLocked(q.info.address.tenant);
    c.usage.quarantined_blocks--;
    c.usage.quarantined_bytes -= q.info.size;
    c.reclaimed++;
  }
  medium_->Drop(q.info, q.stored);
  return StatusCode::kOk;
}

Result<uint64_t> IndexedStore::ReclaimFenced(uint64_t epoch) {
  std::vector<Quarantined> freed;
  {
    std::lock_guard lock(mu_);
    if (epoch != epoch_.load()) return StatusCode::kFenced;
    for (auto it = quarantine_.begin(); it != quarantine_.end();) {
      if (it->second.since_epoch >= epoch) {
        ++it;  // quarantined after that fence: it needs a fence of its own
        continue;
      }
      TenantCounters& c = CountersLocked(it->second.info.address.tenant);
      c.usage.quarantined_blocks--;
      c.usage.quarantined_bytes -= it->second.info.size;
      c.reclaimed++;
      freed.push_back(std::move(it->second));
      it = quarantine_.erase(it);
    }
  }
  for (Quarantined& q : freed) medium_->Drop(q.info, q.stored);
  return uint64_t{freed.size()};
}

StatusCode IndexedStore::Drain(DrainAction action) {
  {
    std::lock_guard lock(mu_);
    switch (action) {
      case DrainAction::kStart:
        draining_ = true;
        return StatusCode::kOk;
      case DrainAction::kRollback:
        if (!draining_ || drain_finished_) return StatusCode::kInvalidArgument;
        draining_ = false;
        return StatusCode::kOk;
      case DrainAction::kFinish:
        if (!draining_) return StatusCode::kInvalidArgument;
        drain_finished_ = true;
        break;
    }
  }
  Result<uint64_t> fenced = Fence();
  return fenced.ok() ? StatusCode::kOk : fenced.status();
}

std::optional<FillState> IndexedStore::FillOutcome(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = outcomes_.find(address);
  if (it == outcomes_.end()) return std::nullopt;
  return it->second.state;
}

bool IndexedStore::RecentlyFenced(const BlockAddress& address, uint64_t now_ns) {
  std::lock_guard lock(mu_);
  auto it = outcomes_.find(address);
  return it != outcomes_.end() && it->second.state == FillState::kFenced &&
         now_ns < it->second.since_ns + options_.reservation_lease_ns;
}

size_t IndexedStore::ExpireReservations(uint64_t now_ns) {
  std::vector<std::shared_ptr<PendingPayload>> discard;
  {
    std::lock_guard lock(mu_);
    for (auto it = reservations_.begin(); it != reservations_.end();) {
      Reservation& r = it->second;
      bool idle = r.writers == 0 && r.writes_inflight == 0 && !r.sealing;
      if (!r.fenced && idle && now_ns > r.last_activity_ns + options_.reservation_lease_ns) {
        CountersLocked(r.info.address.tenant).expired++;
        if (r.payload) discard.push_back(std::move(r.payload));
        ReleaseCreditsLocked(r);
        RecordOutcomeLocked(r.info.address, FillState::kFailed);
        it = reservations_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& p : discard) medium_->Discard(*p);
  return discard.size();
}

uint64_t IndexedStore::Epoch() { return epoch_.load(); }

StoreStats IndexedStore::Stats() {
  std::lock_guard lock(mu_);
  return StoreStats{epoch_.load(), draining_, medium_->errors(), counters_};
}

StatusCode IndexedStore::IsolateDomain(const std::string& path) { return medium_->IsolateDomain(path); }

std::vector<DomainInfo> IndexedStore::Domains() { return medium_->Domains(); }

void IndexedStore::SetRemovalObserver(RemovalObserver observer) {
  std::lock_guard lock(mu_);
  observer_ = std::move(observer);
}

Usage IndexedStore::GlobalUsageLocked() const {
  Usage total;
  for (const auto& [tenant, c] : counters_) total += c.usage;
  return total;
}

TenantCounters& IndexedStore::CountersLocked(const std::string& tenant) { return counters_[tenant]; }

void IndexedStore::RestoreNamespace(const std::string& tenant, const std::string& ns, Owner owner) {
  std::lock_guard lock(mu_);
  index_.AddNamespace(tenant, ns, owner);
}

bool IndexedStore::RestoreBlock(BlockInfo info, std::shared_ptr<StoredPayload> stored) {
  IndexedBlock b;
  b.address = std::move(info.address);
  b.size = info.size;
  b.commit_epoch = info.commit_epoch;
  b.region_id = info.region_id;
  b.owner = info.owner;
  b.commit_time_ns = info.commit_time_ns;
  constexpr std::string_view kTag = "xxh3-128:";
  std::string_view digest(info.checksum);
  if (digest.starts_with(kTag)) digest.remove_prefix(kTag.size());
  b.checksum = ParseBlockName(digest).value_or(BlockDigest{});
  b.keys = IndexKeysOf(info.identity, info.canonical_identity);
  b.pinned = info.pinned;
  return RestoreBlock(b, std::move(stored));
}

bool IndexedStore::RestoreBlock(const IndexedBlock& b, std::shared_ptr<StoredPayload> stored) {
  Record r;
  r.size = b.size;
  r.commit_epoch = b.commit_epoch;
  r.region_id = b.region_id;
  r.commit_time_ns = b.commit_time_ns;
  r.owner = b.owner;
  r.keys = b.keys;
  r.checksum = b.checksum;
  r.pinned = b.pinned;
  r.stored = std::move(stored);
  std::lock_guard lock(mu_);
  return IndexLocked(b.address, std::move(r));
}

void IndexedStore::ReserveBlocks(size_t blocks) {
  std::lock_guard lock(mu_);
  index_.Reserve(blocks);
}

void IndexedStore::RestoreQuarantine(BlockInfo info, std::shared_ptr<StoredPayload> stored) {
  std::lock_guard lock(mu_);
  Usage& u = CountersLocked(info.address.tenant).usage;
  u.quarantined_blocks++;
  u.quarantined_bytes += info.size;
  info.state = BlockState::kQuarantined;
  uint64_t region = info.region_id;
  quarantine_[region] = Quarantined{std::move(info), std::move(stored), 0, "restart", 0};
}

void IndexedStore::SetEpoch(uint64_t epoch) { epoch_.store(epoch); }

std::shared_ptr<StoredPayload> IndexedStore::StoredFor(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  return id ? index_.at(*id).stored : nullptr;
}

}  // namespace gpucache
