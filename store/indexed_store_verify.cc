// IndexedStore: blocks restored unverified at start and checked after it (adr/0016). The
// medium restores the blocks INDEX and its journal name without looking at their files; each
// is checked (Medium::VerifyBlock: one stat, the file read in full if it is not the one the
// entry saw) before any answer about it, and the medium's background walk checks the rest.
// Both settle what they found here, under the lock; the first to settle a block wins, the
// other finds it checked and changes nothing.
#include "store/indexed_store.h"

namespace gpucache {

size_t IndexedStore::RestoreUnverified(std::span<const IndexedBlock> blocks,
                                       const std::shared_ptr<StoredPayload>& stored) {
  MutexLock lock(mu_);  // once a batch: a start restores millions
  size_t restored = 0;
  for (const IndexedBlock& b : blocks) {
    std::optional<BlockId> id = IndexLocked(b.address, CommittedOf(b), b.keys, b.owner, stored);
    if (!id) continue;
    unverified_.Add(*id);
    restored++;
  }
  if (restored != 0) walking_.store(true, std::memory_order_release);
  return restored;
}

bool IndexedStore::Unverified(const BlockAddress& address, const StoredPayload* stored) {
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  return id && unverified_.Contains(*id) && index_.StoredOf(*id).get() == stored;
}

void IndexedStore::VerifyBeforeUse(const BlockAddress& address) {
  if (!walking_.load(std::memory_order_acquire)) return;
  std::shared_ptr<StoredPayload> stored;
  uint64_t region_id;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id || !unverified_.Contains(*id)) return;
    stored = index_.StoredOf(*id);
    region_id = index_.at(*id).region_id;
  }
  Verdict verdict = medium_->VerifyBlock(address, stored.get());  // file I/O: without the lock
  Settle(address, stored.get(), region_id, std::move(verdict));
}

void IndexedStore::Settle(const BlockAddress& address, const StoredPayload* stored,
                          uint64_t region_id, Verdict verdict) {
  std::vector<Departure> damaged;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id || !unverified_.Contains(*id) || index_.StoredOf(*id).get() != stored ||
        index_.at(*id).region_id != region_id) {
      return;  // settled by the other checker, evicted, or another block by now
    }
    switch (verdict.kind) {
      case Verdict::Kind::kSame:
        unverified_.Remove(*id);
        return;
      case Verdict::Kind::kReplaced: {
        // Another block file under the name (read in full): it replaces the entry's block, as
        // an eager start would have indexed it. Its file stays: it is the one indexed now.
        std::shared_ptr<StoredPayload> keep = index_.StoredOf(*id);
        IndexedBlock fresh = IndexedBlockOf(std::move(verdict.info));
        fresh.pinned = index_.at(*id).pinned;
        ForgetLocked(*id);
        IndexLocked(address, CommittedOf(fresh), fresh.keys, fresh.owner, std::move(keep));
        return;
      }
      case Verdict::Kind::kDamaged: {
        // Never served: it leaves and its file is set aside in damaged/, as an eager start does.
        // No reader has it open (every open checks first), so nothing goes to quarantine.
        damaged.push_back(DepartLocked(*id, false));
        damaged.back().damage = "its first use's verification";
        break;
      }
      case Verdict::Kind::kGone: {
        // No file, or none that can be read now: forgotten, whatever is there left in place
        // (an eager start would not have indexed it; the next start tries it again).
        ForgetLocked(*id);
        return;
      }
    }
  }
  // Not a removal the kernel can have seen: it never had the block's attributes (every answer
  // about it waited for this check), so no observer is told.
  Finish(std::move(damaged), std::nullopt);
}

bool IndexedStore::ClaimFound(const BlockAddress& address) {
  MutexLock lock(mu_);
  // Indexed: committed since the start, its file is not the walk's to judge. Reserved: a seal
  // will publish its own file there. Leaving: a departed block's file, about to be removed.
  if (index_.Find(address) || reservations_.Holder(address) ||
      leaving_.Contains(address)) {
    return false;
  }
  leaving_.Leaving(address);  // as a departure: a Reserve of the address waits for Left
  return true;
}

void IndexedStore::ReleaseFound(const BlockAddress& address) {
  MutexLock lock(mu_);
  leaving_.Left(address);
}

bool IndexedStore::AdoptFound(BlockInfo info, std::shared_ptr<StoredPayload> stored) {
  IndexedBlock b = IndexedBlockOf(std::move(info));
  MutexLock lock(mu_);
  bool indexed = IndexLocked(b.address, CommittedOf(b), b.keys, b.owner, std::move(stored)).has_value();
  leaving_.Left(b.address);
  return indexed;
}

std::vector<BlockAddress> IndexedStore::WalkFinished() {
  std::vector<BlockAddress> forgotten;
  {
    MutexLock lock(mu_);
    // The walk did not find their files: an eager start would not have indexed them.
    std::vector<BlockId> unfound;
    unverified_.ForEach([&](BlockId id) { unfound.push_back(id); });
    for (BlockId id : unfound) {
      forgotten.push_back(index_.AddressOf(id));
      ForgetLocked(id);
    }
    unverified_.Clear();
    walking_.store(false, std::memory_order_release);
  }
  return forgotten;
}

}  // namespace gpucache
