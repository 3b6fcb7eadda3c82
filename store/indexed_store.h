// IndexedStore: the store contract (store/block_store.h) as a composition of parts, each with
// one job, under one lock:
//   BlockIndex        the committed blocks and the tables that find them (store/block_index.h)
//   ReservationTable  fills in flight: leases, outcomes, fencing (store/reservation_table.h)
//   Admission         limits, counters, the drain switch, eviction decisions (store/admission.h)
//   QuarantineSet     blocks out of the namespace whose bytes may be in use
//                     (store/quarantine_set.h)
//   LeavingSet        addresses whose departed block's file is not yet gone (store/leaving_set.h)
//   UnverifiedSet     blocks a start restored without checking their files
//                     (store/unverified_set.h, adr/0016)
//   Medium            where the bytes live, held by composition (store/medium.h): MemoryMedium
//                     in memory, FileMedium in block files.
// What is left here is the sequence of each operation: check and decide under the lock, call
// the medium without it (no disk I/O under the lock), then record the outcome; every lifecycle
// move goes through Transition (store/lifecycle.h). The identity of a committed block stays in
// the medium (store/index_keys.h; docs/architecture.md, "The index in memory").
//
// Thread safety: all public methods are safe to call concurrently; mu_ guards every part, in
// the lock order written beside the fields, checked by -Wthread-safety.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "store/admission.h"
#include "store/block_index.h"
#include "store/block_store.h"
#include "store/clock.h"
#include "store/leaving_set.h"
#include "store/medium.h"
#include "store/mutex.h"
#include "store/quarantine_set.h"
#include "store/reservation_table.h"
#include "store/unverified_set.h"

namespace gpucache {

class IndexedStore : public BlockStore {
 public:
  // REQUIRES: MakePolicy(options.eviction_policy) is not null (callers validate the name).
  IndexedStore(StoreOptions options, std::unique_ptr<Medium> medium);
  // Closes the medium (a clean close: it may save what speeds up the next start).
  ~IndexedStore() override;
  // Restores what the medium holds; false (with a reason) if it cannot. Call once, first.
  bool Load(MediumReport& report, std::string& error);

  StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) override;
  StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) override;
  Result<NamespaceInfo> StatNamespace(std::string_view tenant, std::string_view ns) override;
  std::vector<std::string> ListNamespaces(std::string_view tenant) override;
  std::vector<std::string> ListEntries(std::string_view tenant, std::string_view ns) override;
  void VisitBlocks(std::string_view tenant,
                   const std::function<bool(const BlockAddress&)>& visit) override;

  Result<ReservationId> Reserve(const BlockAddress& address, Owner owner) override;
  StatusCode SetIdentity(ReservationId id, std::span<const uint8_t> canonical) override;
  Result<Bytes> GetIdentity(ReservationId id) override;
  Result<size_t> Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) override;
  Result<size_t> Append(ReservationId id, std::span<const uint8_t> data) override;
  StatusCode Truncate(ReservationId id, uint64_t size) override;
  StatusCode OpenWriter(ReservationId id) override;
  void CloseWriter(ReservationId id) override;
  StatusCode Commit(ReservationId id) override;
  std::string ExplainInvalidCommit(ReservationId id) override;
  StatusCode Abort(ReservationId id) override;
  Result<ReservationInfo> StatReservation(ReservationId id) override;
  std::optional<ReservationId> FindReservation(const BlockAddress& address) override;

  // kNotFound also if the stored identity no longer matches (then it is dropped as corrupt).
  Result<BlockInfo> Stat(const BlockAddress& address) override;
  Result<BlockInfo> StatAttributes(const BlockAddress& address) override;
  Result<BlockInfo> Probe(const BlockAddress& address) override;
  Result<std::shared_ptr<BlockReader>> Open(const BlockAddress& address) override;
  Result<std::shared_ptr<BlockReader>> OpenForCopy(const BlockAddress& address) override;
  LookupResult Lookup(const CacheIdentity& identity) override;
  StatusCode Invalidate(const BlockAddress& address) override;

  StatusCode Evict(const BlockAddress& address) override;
  StatusCode SetPinned(const BlockAddress& address, bool pinned) override;
  Result<uint64_t> Fence() override;
  std::vector<QuarantineInfo> ListQuarantine() override;
  Result<QuarantineInfo> StatQuarantine(uint64_t region_id) override;
  StatusCode ReclaimDrained(uint64_t region_id) override;
  Result<uint64_t> ReclaimFenced(uint64_t epoch) override;
  StatusCode Drain(DrainAction action) override;
  std::optional<FillState> FillOutcome(const BlockAddress& address) override;
  bool RecentlyFenced(const BlockAddress& address, uint64_t now_ns) override;
  size_t ExpireReservations(uint64_t now_ns) override;

  uint64_t Epoch() override;
  StoreStats Stats() override;
  StatusCode IsolateDomain(const std::string& path) override;
  std::vector<DomainInfo> Domains() override;
  // Where the medium keeps a block's bytes (a block file), for tools and tests.
  std::string BackingPath(const BlockAddress& address) EXCLUDES(mu_);
  Medium& medium() { return *medium_; }
  // Returns once the walk of verification after start (adr/0016) finished or was stopped: from
  // then on every indexed block has been checked against its file.
  void WaitForVerification() EXCLUDES(mu_);
  // Starts the walk, at Load or, with StoreOptions::defer_background_work, after a daemon's fork.
  void StartBackgroundWork() EXCLUDES(mu_);

  void SetRemovalObserver(RemovalObserver observer) override;
  void SetCommitObserver(CommitObserver observer) override { commit_observer_ = std::move(observer); }
  const StoreOptions& options() const { return options_; }
  void SetLimits(ResourceLimits limits) override;

 protected:
  // The medium state of the committed block at `address`, or null.
  std::shared_ptr<StoredPayload> StoredAt(const BlockAddress& address) EXCLUDES(mu_);

 private:
  friend class VerifyingReader;  // Open's readers (indexed_store_blocks.cc) call the two below
  // The bytes of `address` at `region_id` failed their checksums (`what`: a chunk, the
  // header). If it is still indexed there: set aside, counted, the observer told.
  void ReportCorrupt(const BlockAddress& address, uint64_t region_id, std::string what);
  void ReaderClosed(const BlockAddress& address, uint64_t region_id);  // as a reader closes
  // Open (`client`: a use, and an open reader that eviction respects), OpenForCopy (neither).
  Result<std::shared_ptr<BlockReader>> OpenReader(const BlockAddress& address, bool client);
  bool Indexed(const BlockAddress& address, uint64_t region_id) EXCLUDES(mu_);  // still there
  // Indexes a part of what the medium found at start-up; how many blocks it indexed.
  size_t Restore(const Found& part) EXCLUDES(mu_);
  // Every committed block, for a medium that saves the index (Medium::Close, FoldJournal).
  BlockLister Lister();
  // After a commit or a removal appended to the medium's journal: folds it if it grew too long.
  void FoldJournalIfDue() EXCLUDES(mu_);

  using Reservation = ReservationTable::Reservation;
  using Record = BlockIndex::Record;
  using BlockId = BlockIndex::Id;
  // Verification after start (adr/0016; indexed_store_verify.cc): the walk asks the medium
  // for every file (walker_) and settles each finding, as VerifyBeforeUse settles one.
  void Walk() EXCLUDES(mu_);
  void WalkNamed(const MediumUpkeep::WalkItem& item, MediumUpkeep::WalkCounts& counts) EXCLUDES(mu_);
  void WalkUnnamed(const MediumUpkeep::WalkItem& item, MediumUpkeep::WalkCounts& counts) EXCLUDES(mu_);
  // Applies a verdict on the unverified block (`region_id`) at `address` on `stored`; nothing if
  // that block is no longer there or already checked (a use and the walk may race).
  void Settle(const BlockAddress& address, const StoredPayload* stored, uint64_t region_id,
              Verdict verdict) EXCLUDES(mu_);
  // Before any answer about one block: if it is still unverified, checks its file now (one
  // stat, without the lock) and settles what that found. Free once the walk finished.
  void VerifyBeforeUse(const BlockAddress& address) EXCLUDES(mu_);

  // Ends a reservation (its credits go back unless a fence took them), as ReservationTable::End.
  void EndReservationLocked(ReservationId id, FillState outcome, BlockState to) REQUIRES(mu_);
  BlockInfo AttributesOfLocked(BlockId id) const REQUIRES(mu_);  // without identity
  // Adds a block to the index, the counters and the policy; none if there (`known_new`: not looked for).
  std::optional<BlockId> IndexLocked(const IndexedBlock& block, std::shared_ptr<StoredPayload> stored,
                                     bool known_new = false) REQUIRES(mu_);
  // The namespace of `address` changed now (a fill or a block came or went): its mtime.
  void TouchNamespaceLocked(const BlockAddress& address) REQUIRES(mu_);
  // Takes a block out of the index, the counters and the policy.
  Record UnindexLocked(BlockId id) REQUIRES(mu_);
  // The block leaves, nothing done to its file: EVICTING, out of the index, ABSENT.
  void ForgetLocked(BlockId id) REQUIRES(mu_);
  // The block leaves and its file goes after the lock (Finish): EVICTING, out of the index, its
  // address leaving until the file is gone; `quarantine` keeps the bytes for open readers.
  Departure DepartLocked(BlockId id, bool quarantine) REQUIRES(mu_);
  // Takes a committed block out of the namespace (COMMITTED -> EVICTING), into quarantine
  // while a reader has it open.
  Departure RemoveLocked(BlockId id, const char* reason) REQUIRES(mu_);
  // Medium work for departures, outside the lock; then tells the observer.
  void Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify) EXCLUDES(mu_);
  // A write to `p` met a full device: evicts what may go there, or kNoSpace having evicted none.
  StatusCode MakeDeviceRoom(const PendingPayload& p, const std::string& tenant, uint64_t need)
      EXCLUDES(mu_);
  std::optional<LookupResult> PrefixHitLocked(const CacheIdentity& want, const BlockAddress& self)
      REQUIRES(mu_);
  void PersistPins() EXCLUDES(mu_);

  // Lock order: fs's Handle::mu -> fence_mu_ -> mu_ -> the medium's own locks. mu_ is never
  // held across medium I/O, an observer or a reply to the kernel (docs/architecture.md).
  StoreOptions options_;  // `limits` written under mu_ (SetLimits), read by admission_ under mu_
  const std::unique_ptr<Medium> medium_;  // called without mu_ (SharesDevice excepted)
  Mutex fence_mu_ ACQUIRED_BEFORE(mu_);   // serializes epoch bumps
  Mutex mu_;
  std::atomic<uint64_t> epoch_{1};        // changed under fence_mu_ and mu_, read anywhere
  bool drain_finished_ GUARDED_BY(mu_) = false;
  BlockIndex index_ GUARDED_BY(mu_);
  Admission admission_ GUARDED_BY(mu_);  // reads index_ and medium_: declared after them
  ReservationTable reservations_ GUARDED_BY(mu_);
  QuarantineSet quarantine_ GUARDED_BY(mu_);
  RemovalObserver observer_ GUARDED_BY(mu_);
  LeavingSet leaving_ GUARDED_BY(mu_);  // departed blocks whose files Finish has yet to move
  CommitObserver commit_observer_;  // set once at start-up, then read-only
  UnverifiedSet unverified_ GUARDED_BY(mu_);
  // Set at Load, cleared (under mu_) when the start's walk finished: while false no answer
  // looks at unverified_ (adr/0016).
  std::atomic<bool> walking_{false};
  std::thread walker_;                  // the walk, started once
  std::atomic<bool> walk_done_{true};   // no walk, or it ended (finished or stopped)
  std::atomic<bool> walk_stop_{false};  // the destructor: stop early
};

}  // namespace gpucache
