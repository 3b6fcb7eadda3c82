// FileMedium: a store's bytes (store/medium.h) in one or more data directories of ordinary
// files; OpenFileStore opens the store over it.
//
// Each data directory is a fault domain (one device). A new block is placed in a directory by
// weighted rendezvous hashing of its address over the directories still in service, weighted
// by their free bytes (store/placement.h): reads of many blocks spread over the devices, a
// fuller device takes fewer new blocks, and isolating one moves only the blocks it held (which
// become misses). A committed block stays where it was published; the index knows where. Every directory has the layout below;
// EPOCH is written to all of them and read as the maximum; each one's PINS names the pinned
// blocks it holds (store/pins_file.h).
//
//   <data_dir>/LOCK                       flock()ed while a daemon owns the directory
//   <data_dir>/EPOCH                      decimal epoch, bumped and rewritten at every open
//   <data_dir>/tmp/<region>.part          payload of a reservation (RESERVED/WRITING)
//   <data_dir>/spare/<n>                  files made ahead for reservations, and their payloads
//   <data_dir>/blocks/<tenant>/<ns>/<blk> committed block files (docs/block-format.md)
//   <data_dir>/quarantine/<region>        quarantined blocks (same format), kept until reclaimed
//   <data_dir>/PINS                       pinned blocks: path and commit time (store/pins_file.h)
//
// A reservation takes a spare file (store/spare_pool.h) and is written in place. Its
// checksums are computed as the bytes are written in order; commit reads back only what they
// could not cover (file_store_pending.cc), writes the header, then renames the temporary file
// into place: a block file exists under its name only when complete. A start (FileLoader,
// store/file_loader.h) reloads every committed block whose file checks out, drops every
// reservation (tmp/ and spare/ are emptied) and sets aside a corrupt or truncated block file so
// that it is never a hit (one that cannot be read at all, EIO, is skipped and left for the next
// start). Every file operation goes through Env (store/env.h). Payload corruption that the
// header cannot show is caught on read, chunk by chunk.
//
// Thread safety: as Medium. One FileMedium per data directory (enforced by LOCK).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/block_file.h"
#include "store/block_files.h"
#include "store/data_dir.h"
#include "store/device_set.h"
#include "store/env.h"
#include "store/file_loader.h"
#include "store/index_journal.h"
#include "store/index_log.h"
#include "store/index_snapshot.h"
#include "store/indexed_store.h"
#include "store/located_file.h"
#include "store/posix_io.h"
#include "store/mutex.h"

namespace gpucache {

class UringReader;
class SparePool;

using FileStoreReport = MediumReport;

// Opens or initialises the data directories and the store over them. On failure returns null
// and says why in `error`.
std::unique_ptr<IndexedStore> OpenFileStore(const std::vector<std::string>& data_dirs,
                                            StoreOptions options, FileStoreReport* report,
                                            std::string* error);
inline std::unique_ptr<IndexedStore> OpenFileStore(const std::string& data_dir, StoreOptions options,
                                                   FileStoreReport* report, std::string* error) {
  return OpenFileStore(std::vector<std::string>{data_dir}, std::move(options), report, error);
}

class FileMedium final : public Medium {
 public:
  using Device = DeviceSet::Device;
  FileMedium(std::vector<Device> devices, const StoreOptions& options);
  ~FileMedium() override;

  bool Load(MediumReport& report, std::string& error) override;
  // The index snapshot of every data directory in service (a clean close), for the store to
  // fill; written, it empties the journals.
  std::unique_ptr<IndexWriter> Close() override;
  // What Load found, the walk after it and the journal's folds (file_store_journal.cc).
  MediumUpkeep& upkeep() override { return upkeep_; }
  StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) override;
  StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) override;
  Result<std::shared_ptr<PendingPayload>> Prepare(const ReservationInfo& info) override;
  Result<size_t> Write(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) override;
  StatusCode Truncate(PendingPayload& p, uint64_t size) override;
  StatusCode Allocate(PendingPayload& p, uint64_t size) override;
  std::optional<DeviceSpace> SpaceFor(const PendingPayload& p) override;
  bool SharesDevice(const PendingPayload& p, const StoredPayload* stored) const override;
  Result<Sealed> Seal(PendingPayload& p, const BlockInfo& draft,
                      std::optional<BlockLocation>& read_failed) override;
  void Discard(PendingPayload& p) override;
  Result<Opened> Open(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  Result<Held> ReadHeld(const BlockInfo& info,
                        const std::shared_ptr<StoredPayload>& stored) override;
  std::shared_ptr<StoredPayload> Quarantine(const BlockInfo& info,
                                            const std::shared_ptr<StoredPayload>& stored) override;
  StatusCode Drop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  bool KeptUnderName(const StoredPayload* quarantined) const override;
  size_t DeviceOfPath(const std::string& path) const;
  StatusCode MakeRemovalDurable(const BlockInfo& info, const StoredPayload* stored) override;
  std::string SetAside(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  StatusCode PersistEpoch(uint64_t epoch) override;
  void PersistPins(const std::vector<PinnedBlock>& pinned) override;
  StatusCode IsolateDomain(const std::string& path, StoredTest& lost) override;
  std::vector<DomainInfo> Domains() override;
  // Where a committed block's file is (or where a new one would be placed).
  std::string PathOf(const BlockAddress& address, const StoredPayload* stored) override;
  BlockLocation LocationOf(const BlockAddress& address, const StoredPayload* stored) override;
  // backing_io "uring": the reader's status line and counters; "posix": pread, no counters.
  // Also the bytes seals read back.
  MediumIoStats IoStats() const override;
  // Spare files ready on device `dev` (0 without a pool: a test Env sees every call in order,
  // so the pool runs only over the POSIX one). Starts the pool's thread, as a reservation
  // does: never called by the daemon before it detached and blocked its signals (tests only;
  // IoStats, which the daemon's metrics call, does not count spares for that reason).
  size_t SparesReady(size_t dev) const;

  // Spare files kept ready per data directory: a burst of this many CREATEs never waits for
  // an inode allocation.
  static constexpr size_t kSpareDepth = 8;
  // Damaged block files a start keeps in damaged/ for examination (the newest).
  static constexpr size_t kMaxDamaged = kMaxDamagedFiles;


 private:
  const StoreOptions options_;
  bool StillUnderLiveName(const QuarantinedFile& q);
  // Whether adding `bytes` to device `dev` would take it below the free space
  // options_.min_free_percent keeps (DeviceSet::KeptFree; file_store_pending.cc).
  bool WouldEatKeptFree(size_t dev, uint64_t bytes);
  // Index files: INDEX (store/index_snapshot.h) and the journal (store/index_journal.h), each
  // device's IndexLog. A start reads them (FileLoader); commits and removals append to the
  // journal (file_store_journal.cc); a clean close writes INDEX from memory and empties it.
  std::vector<std::unique_ptr<IndexLog>> logs_;  // per device (INDEX written by SnapshotWriter)
  // Appends to the device's journal; a fold is due once it passed journal_rotate_bytes_.
  void Append(size_t dev, const JournalRecord& record);
  // Starts folding the device's journal into a new INDEX if it holds more than `limit` bytes
  // (a rotation): true if the INDEX is due, then written and the rotation ended by the
  // SnapshotWriter of FoldJournal or EndWalk. REQUIRES: the start's walk is done (the INDEX
  // takes every indexed block as checked).
  bool RotateJournalPast(size_t dev, uint64_t limit);
  void EndRotations(const std::vector<size_t>& devs, const std::vector<size_t>& written);
  std::atomic<bool> fold_due_{false};  // a journal passed journal_rotate_bytes_ (Append)
  // `fd`: the block file just published as `draft` (its stat gives what INDEX checks later).
  void JournalCommit(size_t dev, int fd, const BlockInfo& draft,
                     const PayloadChecksums& sums);
  void JournalRemoval(size_t dev, const BlockAddress& address);
  // Past this many journal bytes a device's journal is folded into a new INDEX
  // (StoreOptions::journal_rotate_bytes, else 64 MiB).
  static constexpr uint64_t kJournalRotateBytes = 64ull << 20;
  const uint64_t journal_rotate_bytes_;
  // The epoch in EPOCH: 0 if there is none (a new directory), an error if it cannot be read.
  Result<uint64_t> ReadEpoch(const std::string& path);
  // Writes EPOCH in every data directory in service; on failure `failed` names the file that
  // could not be written (the start's message says which device).
  StatusCode WriteEpochFiles(uint64_t epoch, std::string* failed);
  StatusCode MakeDurableDir(const std::string& path, const std::string& parent);
  // Directories this daemon made whose name was not yet synced in their parent (sync_commits):
  // another namespace of a new tenant finds the tenant's directory there (EEXIST) while the
  // first is still syncing it, or after that sync failed, and syncs it too.
  Mutex unsynced_dirs_mu_;
  std::set<std::string> unsynced_dirs_ GUARDED_BY(unsynced_dirs_mu_);
  std::string PathIn(size_t dev, const BlockAddress& address) const;
  // The payload's checksums: what its writes fed, and the rest read back.
  Result<PayloadChecksums> ChecksumsOf(PendingPayload& p, uint64_t size);
  // Open and ReadHeld: the block's file opened and its header checked against `info`.
  Result<std::pair<Fd, BlockHeader>> OpenChecked(const BlockInfo& info, const StoredPayload* stored);

  // What a start finds, and the walk after it (adr/0016): store/file_loader.h.
  std::unique_ptr<FileLoader> loader_;
  size_t walk_dev_ = 0;  // the device the start's walk covers (one: adr/0016)
  std::atomic<bool> walk_over_{true};  // no walk, or EndWalk ran (Append may rotate again)
  bool walk_started_ = false, walk_completed_ = false;  // set by Load and EndWalk

  DeviceSet devices_;  // placement and isolation
  std::vector<std::shared_ptr<StoredPayload>> located_;  // per device, shared by its blocks
  Env& env_;  // options().env, or the POSIX one
  // backing_io "uring": serves every UringSource this store opens (so it outlives them).
  std::unique_ptr<UringReader> uring_;
  std::unique_ptr<SparePool> spares_;  // started by Load over the POSIX Env
  std::atomic<uint64_t> read_back_bytes_{0};
  // Payload reads served by pread (backing_io "posix"): counted by each FileSource, which
  // never outlives this medium.
  std::atomic<uint64_t> pread_reads_{0};

  // MediumUpkeep over this medium's state: the start's hand-over and walk go to the loader,
  // what they read in full goes into the journal.
  class Upkeep final : public MediumUpkeep {
   public:
    explicit Upkeep(FileMedium& medium) : m_(medium) {}
    bool NextFound(Found& part) override;
    bool JournalFoldDue() const override { return m_.fold_due_.load(std::memory_order_relaxed); }
    std::unique_ptr<IndexWriter> FoldJournal() override;
    Verdict VerifyBlock(const BlockAddress& address, const StoredPayload* stored) override;
    bool WalkPending() const override {
      return m_.walk_started_ && !m_.walk_over_.load(std::memory_order_acquire);
    }
    bool NextWalkItem(WalkItem& item) override;
    Verdict CheckWalkItem(const WalkItem& item) override;
    Result<BlockInfo> ReadWalkItem(const WalkItem& item) override;
    void AdoptedWalkItem(const WalkItem& item) override;
    WalkEnd EndWalk(bool completed, std::span<const BlockAddress> missing, const WalkCounts& counts) override;

   private:
    FileMedium& m_;
  };
  Upkeep upkeep_{*this};
};

}  // namespace gpucache
