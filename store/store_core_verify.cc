// StoreCore: blocks restored unverified at start and checked after it (adr/0016). The
// medium hands over the blocks INDEX and its journal name without looking at their files
// (Found::unverified); each is checked (Medium::VerifyBlock: one stat, the file read in full
// if it is not the one the entry saw) before any answer about it, and the store's walk thread has the medium check the
// rest, file by file (Medium::NextWalkItem). Both settle what they found here, under the lock;
// the first to settle a block wins, the other finds it checked and changes nothing. The calls
// go one way: the store asks, the medium answers.
#include <chrono>

#include "store/layout.h"
#include "store/store_core.h"

namespace gpucache {

void StoreCore::VerifyBeforeUse(const BlockAddress& address) {
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
  Verdict verdict = medium_->upkeep().VerifyBlock(address, stored.get());  // file I/O: without the lock
  Settle(address, stored.get(), region_id, std::move(verdict));
}

void StoreCore::Settle(const BlockAddress& address, const StoredPayload* stored,
                          uint64_t region_id, Verdict verdict) {
  std::vector<Departure> damaged;
  bool was_pinned = false;
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
        // an eager start would have indexed it. Its file stays: it is the one indexed now. Its
        // pin is its own commit's (set by the check from PINS), not the entry's: a pin names a
        // commit (store/pins_file.h), and none changed since the start (pins verify first).
        std::shared_ptr<StoredPayload> keep = index_.StoredOf(*id);
        IndexedBlock fresh = std::move(verdict.info);
        ForgetLocked(*id);
        IndexLocked(fresh, std::move(keep));
        return;
      }
      case Verdict::Kind::kDamaged: {
        // Never served: it leaves and its file is set aside in damaged/, as an eager start does.
        // No reader has it open (every open checks first), so nothing goes to quarantine.
        // Counted as a read's checksum failure is (ReportCorrupt), once: the first to settle
        // it wins, and its file leaves for damaged/.
        admission_.Counters(address.tenant).checksum_failures++;
        was_pinned = index_.at(*id).pinned;
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
  // about it waited for this check), so no observer is told. Telling it kCorrupt would do harm:
  // the daemon's observer invalidates the block's entry at once (fs/session.cc), which takes
  // the directory's lock, and this check runs inside a LOOKUP that holds it. The damage is
  // counted above and named in the walk's report.
  Finish(std::move(damaged), std::nullopt);
  // The pin leaves with the block, as in ReportCorrupt: a stale entry in PINS would pin what
  // is committed at this path next, from the next restart on.
  if (was_pinned) PersistPins();
}

void StoreCore::StartBackgroundWork() {
  if (walk_done_.load(std::memory_order_acquire) || walker_.joinable()) return;
  walker_ = std::thread([this] { Walk(); });
}

void StoreCore::WaitForVerification() {
  for (bool done = walk_done_.load(std::memory_order_acquire); !done;
       done = walk_done_.load(std::memory_order_acquire)) {
    walk_done_.wait(false, std::memory_order_acquire);
  }
}

void StoreCore::Walk() {
  if (options_.before_walk) options_.before_walk();
  const auto start = std::chrono::steady_clock::now();
  MediumUpkeep::WalkCounts counts;
  MediumUpkeep::WalkItem item;
  while (!walk_stop_.load(std::memory_order_relaxed) && medium_->upkeep().NextWalkItem(item)) {
    if (item.region_id) {
      WalkNamed(item, counts);
    } else {
      WalkUnnamed(item, counts);
    }
  }
  const bool completed = !walk_stop_.load();
  counts.walk_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  std::vector<BlockAddress> forgotten;
  if (completed) {
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
  MediumUpkeep::WalkEnd end = medium_->upkeep().EndWalk(completed, forgotten, counts);
  WriteIndex(std::move(end.index));
  if (completed && options_.walk_finished) options_.walk_finished(end.report);
  walk_done_.store(true, std::memory_order_release);
  walk_done_.notify_all();
}

// A file INDEX or the journal names: checked unless a use checked it first (or it left).
void StoreCore::WalkNamed(const MediumUpkeep::WalkItem& item, MediumUpkeep::WalkCounts& counts) {
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(item.address);
    if (!id || !unverified_.Contains(*id) || index_.StoredOf(*id) != item.stored) {
      counts.loaded++;  // checked by a use first, or gone since
      return;
    }
  }
  Verdict v = medium_->upkeep().CheckWalkItem(item);  // file I/O: without the lock
  switch (v.kind) {
    case Verdict::Kind::kSame: counts.from_snapshot++; [[fallthrough]];
    case Verdict::Kind::kReplaced: counts.loaded++; break;
    case Verdict::Kind::kDamaged:
    case Verdict::Kind::kGone: counts.skipped++; break;
  }
  Settle(item.address, item.stored.get(), *item.region_id, std::move(v));
}

// A file no entry names: read in full, as an eager start does, with its address held so that
// no commit or departure changes the file meanwhile.
void StoreCore::WalkUnnamed(const MediumUpkeep::WalkItem& item, MediumUpkeep::WalkCounts& counts) {
  const BlockAddress& address = item.address;
  {
    MutexLock lock(mu_);
    // Indexed: committed since the start, its file is not the walk's to judge. Reserved: a seal
    // will publish its own file there. Leaving: a departed block's file, about to be removed.
    if (index_.Find(address) || reservations_.Claimed(address) || leaving_.Contains(address)) return;
    leaving_.Leaving(address);  // as a departure: a Reserve of the address waits for Left
  }
  Result<BlockInfo> info = medium_->upkeep().ReadWalkItem(item);  // file I/O: without the lock
  if (!info.ok()) {
    counts.skipped++;
    MutexLock lock(mu_);
    // A damaged file under a block's name was set aside: counted as an eager start counts it.
    if (info.status() == StatusCode::kInvalidArgument && IsValidBlockName(address.block)) {
      admission_.Counters(address.tenant).checksum_failures++;
    }
    leaving_.Left(address);
    return;
  }
  IndexedBlock b = std::move(info.value());
  bool indexed;
  {
    MutexLock lock(mu_);
    indexed = IndexLocked(b, item.stored).has_value();
    leaving_.Left(address);
  }
  if (!indexed) return;
  counts.loaded++;
  medium_->upkeep().AdoptedWalkItem(item);
}

}  // namespace gpucache
