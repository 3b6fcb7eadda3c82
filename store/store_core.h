// StoreCore: what the store's roles share. IndexedStore (store/indexed_store.h) is the store
// contract (store/block_store.h) in layers, one per role, over this core:
//   StoreCore    the parts under one lock, and the moves every role makes on them
//   StoreFills   BlockFills: namespaces and the commit protocol      (store/store_fills.h)
//   StoreReads   BlockReads: stat, open, lookup, listings            (store/store_reads.h)
//   StoreAdmin   BlockAdmin: removals, fences, drains, domains, ...  (store/store_admin.h)
//   IndexedStore the whole: start-up (Load, the walk of adr/0016) and the medium's close
// Each layer derives from the one below it only to share this one core (one lock, one index);
// none calls the layer below but through the core. The parts, each with one job:
//   BlockIndex        the committed blocks and the tables that find them (store/block_index.h)
//   ReservationTable  fills in flight: leases, outcomes, fencing (store/reservation_table.h)
//   Admission         limits, counters, the drain switch, eviction decisions (store/admission.h)
//   QuarantineSet     blocks out of the namespace whose bytes may be in use
//   LeavingSet        addresses whose departed block's file is not yet gone
//   NamespaceClaims   namespaces whose directories are being made or removed now
//   UnverifiedSet     blocks a start restored without checking their files (adr/0016)
//   Medium            where the bytes live (store/medium.h): MemoryMedium or FileMedium.
// The sequence of each operation: check and decide under the lock, call the medium without it
// (no disk I/O under the lock), then record the outcome; every lifecycle move goes through
// Transition (store/lifecycle.h).
//
// Thread safety: mu_ guards every part, in the lock order written beside the fields, checked
// by -Wthread-safety. No public methods: only the layers use it.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/admission.h"
#include "store/block_index.h"
#include "store/block_store.h"
#include "store/clock.h"
#include "store/leaving_set.h"
#include "store/medium.h"
#include "store/mutex.h"
#include "store/namespace_claims.h"
#include "store/quarantine_set.h"
#include "store/reservation_table.h"
#include "store/unverified_set.h"

namespace gpucache {

class StoreCore {
 protected:
  // REQUIRES: MakePolicy(options.eviction_policy) is not null (callers validate the name).
  StoreCore(StoreOptions options, std::unique_ptr<Medium> medium);
  ~StoreCore() = default;

  friend class VerifyingReader;  // the readers Open hands out call the three below, and medium_
  // The bytes of `address` at `region_id` failed their checksums (`what`: a chunk, the
  // header). If it is still indexed there: set aside, counted, the observer told.
  void ReportCorrupt(const BlockAddress& address, uint64_t region_id, std::string what);
  // The block's file is not there (removed by hand, a cleaner, another program): the block
  // leaves the namespace, a miss from now on, told as kLost with `file` named, and counted
  // (files_missing), not as a checksum failure: its bytes were never read wrong (review,
  // 2026-12-07: each such open was EIO and a checksum failure, logged as damage "deleted").
  void ReportVanished(const BlockAddress& address, uint64_t region_id, const std::string& file);
  // A read of a block file failed with an I/O error, or found it cut short (BackingReadError):
  // counted, the observer told. Nothing else: the block stays (a device error is no proof of
  // damage; a file cut short is set aside by its next open, which checks its size).
  void ReportReadError(const BackingReadError& error) EXCLUDES(mu_);
  void ReaderClosed(const BlockAddress& address, uint64_t region_id);  // as a reader closes

  using Reservation = ReservationTable::Reservation;
  using Record = BlockIndex::Record;
  using BlockId = BlockIndex::Id;

  // The medium state of the committed block at `address`, or null.
  std::shared_ptr<StoredPayload> StoredAt(const BlockAddress& address) EXCLUDES(mu_);
  bool Indexed(const BlockAddress& address, uint64_t region_id) EXCLUDES(mu_);  // still there
  // Adds every committed block to the index a medium asked for (Medium::Close, FoldJournal,
  // EndWalk), then has it written without the lock; nothing if `index` is null.
  void WriteIndex(std::unique_ptr<IndexWriter> index) EXCLUDES(mu_);
  // Saves which blocks are pinned (the medium keeps them across restarts). One at a time, so
  // that the set written last is the newest (two writers could otherwise land an older set
  // last, or share the temporary file).
  void PersistPins() EXCLUDES(mu_, pins_mu_);
  // Pins or unpins `address` and saves the set (best effort: see the definition).
  StatusCode ChangePinAndPersist(const BlockAddress& address, bool pinned) EXCLUDES(mu_, pins_mu_);
  std::vector<PinnedBlock> PinnedSet() REQUIRES(pins_mu_) EXCLUDES(mu_);
  // After a commit or a removal appended to the medium's journal: folds it if it grew too long.
  void FoldJournalIfDue() EXCLUDES(mu_);
  // Applies a verdict on the unverified block (`region_id`) at `address` on `stored`; nothing if
  // that block is no longer there or already checked (a use and the walk may race).
  void Settle(const BlockAddress& address, const StoredPayload* stored, uint64_t region_id,
              Verdict verdict) EXCLUDES(mu_);
  // Before any answer about one block: if it is still unverified, checks its file now (one
  // stat, without the lock) and settles what that found. Free once the walk finished.
  void VerifyBeforeUse(const BlockAddress& address) EXCLUDES(mu_);
  // Verification after start (adr/0016; store/store_core_verify.cc): the walk asks the medium
  // for every file (walker_) and settles each finding, as VerifyBeforeUse settles one.
  // Returns once the walk finished or was stopped: from then on every indexed block has been
  // checked against its file.
  void WaitForVerification() EXCLUDES(mu_);
  // Starts the walk, at Load or, with StoreOptions::defer_background_work, after a daemon's fork.
  void StartBackgroundWork() EXCLUDES(mu_);
  void Walk() EXCLUDES(mu_);
  void WalkNamed(const MediumUpkeep::WalkItem& item, MediumUpkeep::WalkCounts& counts)
      EXCLUDES(mu_);
  void WalkUnnamed(const MediumUpkeep::WalkItem& item, MediumUpkeep::WalkCounts& counts)
      EXCLUDES(mu_);

  // Ends a reservation (its credits go back unless a fence took them), as ReservationTable::End.
  void EndReservationLocked(ReservationId id, FillState outcome, BlockState to) REQUIRES(mu_);
  BlockInfo AttributesOfLocked(BlockId id) const REQUIRES(mu_);  // without identity
  // Adds a block to the index, the counters and the policy; none if there (`known_new`: not
  // looked for).
  std::optional<BlockId> IndexLocked(const IndexedBlock& block,
                                     std::shared_ptr<StoredPayload> stored,
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
  // Medium work for departures, outside the lock; then tells the observer. kIoError if a
  // departure's bytes stayed under its name (Medium::Drop), which the next start would load.
  StatusCode Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify) EXCLUDES(mu_);
  // Moves to the next epoch (BlockAdmin::Fence): persisted first, then every fill of an older
  // epoch fenced. Returns the new epoch. With `from`, only if the epoch is still `from` (two
  // fills that both found it used up fence once, not twice); else the current epoch.
  Result<uint64_t> AdvanceEpoch(std::optional<uint64_t> from = std::nullopt) EXCLUDES(fence_mu_, mu_);
  // How many region ids one epoch gives (StoreOptions::region_ids_per_epoch).
  uint64_t RegionIdsPerEpoch() const {
    return options_.region_ids_per_epoch ? options_.region_ids_per_epoch : ReservationTable::kRegionSequenceLimit;
  }

  // Lock order: fs's Handle::mu -> fence_mu_ -> mu_ -> the medium's own locks. mu_ is never
  // held across medium I/O, an observer or a reply to the kernel (docs/architecture.md).
  StoreOptions options_;  // `limits` written under mu_ (SetLimits), read by admission_ under mu_
  const std::unique_ptr<Medium> medium_;  // called without mu_ (SharesDevice excepted)
  Mutex drain_mu_ ACQUIRED_BEFORE(fence_mu_);  // serializes a drain's finishes (StoreAdmin::Drain)
  Mutex fence_mu_ ACQUIRED_BEFORE(mu_);   // serializes epoch bumps
  Mutex pins_mu_ ACQUIRED_BEFORE(mu_);    // serializes the pinned set's writes
  Mutex mu_;
  std::atomic<uint64_t> epoch_{1};        // changed under fence_mu_ and mu_, read anywhere
  std::atomic<uint64_t> automatic_fences_{0};  // epochs that gave out their region ids
  std::atomic<uint64_t> files_missing_{0};      // block files found gone (ReportVanished)
  std::atomic<uint64_t> read_errors_{0};       // reads of block files that failed (ReportReadError)
  bool drain_finished_ GUARDED_BY(mu_) = false;
  BlockIndex index_ GUARDED_BY(mu_);
  Admission admission_ GUARDED_BY(mu_);  // reads index_ and medium_: declared after them
  ReservationTable reservations_ GUARDED_BY(mu_);
  QuarantineSet quarantine_ GUARDED_BY(mu_);
  RemovalObserver observer_ GUARDED_BY(mu_);
  AutomaticFenceObserver fence_observer_ GUARDED_BY(mu_);
  BackingReadErrorObserver read_error_observer_ GUARDED_BY(mu_);
  LeavingSet leaving_ GUARDED_BY(mu_);  // departed blocks whose files Finish has yet to move
  NamespaceClaims namespace_claims_ GUARDED_BY(mu_);  // mkdirs and rmdirs under way
  CommitObserver commit_observer_;  // set once at start-up, then read-only
  InvalidationObserver invalidation_observer_;  // the same
  UnverifiedSet unverified_ GUARDED_BY(mu_);
  // Set at Load, cleared (under mu_) when the start's walk finished: while false no answer
  // looks at unverified_ (adr/0016).
  std::atomic<bool> walking_{false};
  std::thread walker_;                  // the walk, started once
  std::atomic<bool> walk_done_{true};   // no walk, or it ended (finished or stopped)
  std::atomic<bool> walk_stop_{false};  // the destructor: stop early
};

}  // namespace gpucache
