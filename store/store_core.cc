// StoreCore: the moves every role of the store makes on its parts: a block indexed, taken
// out, departed and finished outside the lock; a reservation ended; corruption reported.
#include "store/store_core.h"

namespace gpucache {

StoreCore::StoreCore(StoreOptions options, std::unique_ptr<Medium> medium)
    : options_(std::move(options)),
      medium_(std::move(medium)),
      admission_(options_.limits, options_.eviction_policy, index_, *medium_) {}

void StoreCore::EndReservationLocked(ReservationId id, FillState outcome, BlockState to) {
  Reservation* r = reservations_.Find(id);
  if (!r) return;
  if (!r->fenced) admission_.ReservationReleased(r->info.address.tenant, r->credited_bytes);
  TouchNamespaceLocked(r->info.address);  // its .part leaves the listing
  reservations_.End(id, outcome, to);
}

BlockInfo StoreCore::AttributesOfLocked(BlockId id) const {
  BlockInfo info = BlockInfoOf(index_.Read(id));
  info.state = index_.at(id).state();
  return info;
}

std::optional<StoreCore::BlockId> StoreCore::IndexLocked(const IndexedBlock& b,
                                                               std::shared_ptr<StoredPayload> stored,
                                                               bool known_new) {
  const BlockAddress& address = b.address;
  const IndexKeys& keys = b.keys;
  // The resident block whose last chain hash is this block's parent hash, if any (looked up
  // before this one is in, so that a one-hash chain is not its own parent).
  std::optional<BlockId> parent;
  if (std::optional<uint32_t> ns = index_.namespaces().Find(address.tenant, address.ns)) {
    parent = index_.ByTail(*ns, keys.parent);
  }
  std::optional<BlockId> id = index_.Insert(b, std::move(stored), known_new);
  if (!id) return std::nullopt;
  admission_.Indexed(*id, parent, keys.valid_length < keys.block_capacity, PolicyKeyOf(address));
  unverified_.Remove(*id);  // a reused id: this block is checked
  return id;
}

void StoreCore::TouchNamespaceLocked(const BlockAddress& address) {
  if (std::optional<uint32_t> ns = index_.namespaces().Find(address.tenant, address.ns)) index_.namespaces().Touch(*ns, NowNs());
}

StoreCore::Record StoreCore::UnindexLocked(BlockId id) {
  unverified_.Remove(id);  // evicted before checked: nothing to check
  index_.namespaces().Touch(index_.NamespaceOf(id), NowNs());
  admission_.Unindexing(id);
  return index_.Remove(id);
}

void StoreCore::ForgetLocked(BlockId id) {
  index_.MarkEvicting(id);
  BlockState state = UnindexLocked(id).state();
  MustTransition(state, BlockState::kAbsent);
}

Departure StoreCore::DepartLocked(BlockId id, bool quarantine) {
  index_.MarkEvicting(id);
  BlockInfo info = AttributesOfLocked(id);
  std::shared_ptr<StoredPayload> stored = index_.StoredOf(id);
  UnindexLocked(id);
  leaving_.Leaving(info.address);
  return Departure{std::move(info), std::move(stored), quarantine};
}

Departure StoreCore::RemoveLocked(BlockId id, const char* reason) {
  int open = static_cast<int>(index_.OpenReaders(id));
  Departure d = DepartLocked(id, open > 0);
  if (d.quarantine) {
    // The bytes may still be in use through an open handle: they stay, counted, until a
    // drained attestation or a fenced reclaim.
    admission_.Quarantined(d.info.address.tenant, d.info.size);
    admission_.Counters(d.info.address.tenant).quarantined++;
    quarantine_.Add({d.info, d.stored, open, reason, epoch_.load(), /*moving=*/true});
  }
  return d;
}

// Medium work for blocks that left the namespace, outside the lock.
StatusCode StoreCore::Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify) {
  RemovalObserver observer;
  {
    MutexLock lock(mu_);
    observer = observer_;
  }
  StatusCode stayed = StatusCode::kOk;
  for (Departure& d : departures) {
    if (d.quarantine) {
      auto moved = medium_->Quarantine(d.info, d.stored);
      if (medium_->KeptUnderName(moved.get())) stayed = StatusCode::kIoError;
      MutexLock lock(mu_);
      quarantine_.SetStored(d.info.region_id, std::move(moved));
      leaving_.Left(d.info.address);
    } else if (!d.damage.empty()) {
      std::string kept = medium_->SetAside(d.info, d.stored);
      if (!kept.empty()) d.damage += "; " + kept;
      MustTransition(d.info.state, BlockState::kAbsent);
      MutexLock lock(mu_);
      leaving_.Left(d.info.address);
    } else {
      if (medium_->Drop(d.info, d.stored) != StatusCode::kOk) stayed = StatusCode::kIoError;
      MustTransition(d.info.state, BlockState::kAbsent);
      MutexLock lock(mu_);
      leaving_.Left(d.info.address);
    }
    if (notify && observer) observer(d.info.address, *notify, d.damage.empty() ? d.note : d.damage);
  }
  if (!departures.empty()) FoldJournalIfDue();  // removals are journaled too
  return stayed;
}

bool StoreCore::Indexed(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  return id && index_.at(*id).region_id == region_id;
}

void StoreCore::ReaderClosed(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  admission_.ReaderClosed(address.tenant);
  std::optional<BlockId> id = index_.Find(address);
  if (id && index_.at(*id).region_id == region_id) {
    index_.ReaderClosed(*id);
    return;
  }
  // Last close of a quarantined block does not free it: only reclaim does.
  quarantine_.ReaderClosed(region_id);
}

void StoreCore::ReportCorrupt(const BlockAddress& address, uint64_t region_id, std::string what) {
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
  // model tester, tests/reliability/model_test.cc). A failed write is counted (metadata errors);
  // nobody waits on this answer.
  if (was_pinned) PersistPins();
}

void StoreCore::ReportVanished(const BlockAddress& address, uint64_t region_id, const std::string& file) {
  std::vector<Departure> gone;
  bool was_pinned;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id || index_.at(*id).region_id != region_id) return;  // it left meanwhile: a miss anyway
    was_pinned = index_.at(*id).pinned;
    files_missing_.fetch_add(1, std::memory_order_relaxed);
    gone.push_back(DepartLocked(*id, false));
    gone.back().note = "its file " + file + " is gone (removed outside gpucache)";
  }
  Finish(std::move(gone), RemovalReason::kLost);  // the removal is journaled: not expected at the next start
  if (was_pinned) PersistPins();
}

void StoreCore::ReportReadError(const BackingReadError& error) {
  read_errors_.fetch_add(1, std::memory_order_relaxed);
  BackingReadErrorObserver observer;
  {
    MutexLock lock(mu_);
    observer = read_error_observer_;
  }
  if (observer) observer(error);  // it logs: never under the lock
}

std::shared_ptr<StoredPayload> StoreCore::StoredAt(const BlockAddress& address) {
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  return id ? index_.StoredOf(*id) : nullptr;
}

void StoreCore::WriteIndex(std::unique_ptr<IndexWriter> index) {
  if (!index) return;
  {
    MutexLock lock(mu_);
    IndexedBlock b;  // reused: its strings keep their buffers from one block to the next
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    index_.ForEach([&](BlockId id) NO_THREAD_SAFETY_ANALYSIS {
      index_.Read(id, b);
      index->Add(b, index_.StoredOf(id).get());
    });
  }
  index->Write();  // file I/O: without the lock
}

void StoreCore::FoldJournalIfDue() {
  if (medium_->upkeep().JournalFoldDue()) WriteIndex(medium_->upkeep().FoldJournal());
}

void StoreCore::PersistPins() {
  MutexLock write(pins_mu_);
  medium_->PersistPins(PinnedSet());
}

std::vector<PinnedBlock> StoreCore::PinnedSet() {
  std::vector<PinnedBlock> pinned;
  MutexLock lock(mu_);
  // The lambda runs under mu_ (the analysis checks it as a function of its own).
  index_.ForEach([&](BlockId id) NO_THREAD_SAFETY_ANALYSIS {
    if (index_.at(id).pinned) {
      pinned.push_back({index_.AddressOf(id), index_.at(id).commit_time_ns, index_.StoredOf(id)});
    }
  });
  return pinned;
}

StatusCode StoreCore::ChangePinAndPersist(const BlockAddress& address, bool pinned) {
  MutexLock write(pins_mu_);
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) return StatusCode::kNotFound;
    if (index_.at(*id).pinned == pinned) return StatusCode::kOk;
    index_.at(*id).pinned = pinned;
  }
  // A set that cannot be saved (a full or failing device) is counted as a metadata error and
  // the change holds until the next restart, which applies the set saved last. It is not
  // refused: on a full disk of pinned blocks an unpin is how the operator makes room, and
  // PINS cannot be rewritten there (docs/operations.md, "Pins").
  medium_->PersistPins(PinnedSet());
  return StatusCode::kOk;
}

}  // namespace gpucache
