// FileMedium: a store's bytes (store/medium.h) in one or more data directories of ordinary
// files; OpenFileStore opens the store over it.
//
// Each data directory is a fault domain (one device). A new block is placed in a directory by
// weighted rendezvous hashing of its address over the directories still in service, weighted
// by their free bytes (store/placement.h): reads of many blocks spread over the devices, a
// fuller device takes fewer new blocks, and isolating one moves only the blocks it held (which
// become misses). A committed block stays where it was published; the index knows where. Every directory has the layout below;
// EPOCH and PINS are written to all of them and read as the maximum / the union.
//
//   <data_dir>/LOCK                       flock()ed while a daemon owns the directory
//   <data_dir>/EPOCH                      decimal epoch, bumped and rewritten at every open
//   <data_dir>/tmp/<region>.part          payload of a reservation (RESERVED/WRITING)
//   <data_dir>/spare/<n>                  files made ahead for reservations, and their payloads
//   <data_dir>/blocks/<tenant>/<ns>/<blk> committed block files (docs/block-format.md)
//   <data_dir>/quarantine/<region>        quarantined blocks (same format), kept until reclaimed
//   <data_dir>/PINS                       relative paths of pinned blocks, one per line
//
// A reservation takes a spare file (store/file_store_spares.h) and is written in place. Its checksums are
// computed as the bytes are written in order; commit reads back only what they could not
// cover (file_store_pending.cc), writes the header, then renames the temporary file into
// place: a block file exists under its name only when complete. Open() reloads every
// committed block whose header checks out, drops every reservation (tmp/ and spare/ are
// emptied) and deletes a corrupt or truncated block file so that it is never a hit (one that
// cannot be read at all, EIO, is skipped and left for the next start). Every file operation
// goes through Env (store/env.h). Payload
// corruption that the header cannot show is caught on read, chunk by chunk.
//
// Thread safety: as BlockStore. One FileStore per data directory (enforced by LOCK).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "store/block_file.h"
#include "store/data_dir.h"
#include "store/device_set.h"
#include "store/env.h"
#include "store/index_journal.h"
#include "store/index_log.h"
#include "store/index_snapshot.h"
#include "store/indexed_store.h"
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
  bool NextFound(Found& part) override;
  // Writes the index snapshot of every data directory in service (a clean close).
  void Close(const BlockLister& blocks) override;
  bool JournalFoldDue() const override { return fold_due_.load(std::memory_order_relaxed); }
  void FoldJournal(const BlockLister& blocks) override;
  StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) override;
  StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) override;
  Result<std::shared_ptr<PendingPayload>> Prepare(const ReservationInfo& info) override;
  Result<size_t> Write(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) override;
  StatusCode Truncate(PendingPayload& p, uint64_t size) override;
  StatusCode Allocate(PendingPayload& p, uint64_t size) override;
  std::optional<DeviceSpace> SpaceFor(const PendingPayload& p) override;
  bool SharesDevice(const PendingPayload& p, const StoredPayload* stored) const override;
  Result<Sealed> Seal(PendingPayload& p, const BlockInfo& draft, const IndexKeys& keys) override;
  void Discard(PendingPayload& p) override;
  Result<Opened> Open(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  Result<Held> ReadHeld(const BlockInfo& info,
                        const std::shared_ptr<StoredPayload>& stored) override;
  std::shared_ptr<StoredPayload> Quarantine(const BlockInfo& info,
                                            const std::shared_ptr<StoredPayload>& stored) override;
  void Drop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  std::string SetAside(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  StatusCode PersistEpoch(uint64_t epoch) override;
  void PersistPins(const std::vector<BlockAddress>& pinned) override;
  StatusCode IsolateDomain(const std::string& path, StoredTest& lost) override;
  std::vector<DomainInfo> Domains() override;
  Verdict VerifyBlock(const BlockAddress& address, const StoredPayload* stored) override;
  bool WalkPending() const override { return walk_started_ && !walk_over_.load(std::memory_order_acquire); }
  bool NextWalkItem(WalkItem& item) override;
  Verdict CheckWalkItem(const WalkItem& item) override;
  Result<BlockInfo> ReadWalkItem(const WalkItem& item) override;
  void AdoptedWalkItem(const WalkItem& item) override;
  MediumReport EndWalk(bool completed, std::span<const BlockAddress> missing, const WalkCounts& counts,
                       const BlockLister& blocks) override;
  // Where a committed block's file is (or where a new one would be placed).
  std::string PathOf(const BlockAddress& address, const StoredPayload* stored) override;
  // backing_io "uring": the reader's status line and counters; "posix": pread, no counters.
  MediumIoStats IoStats() const override;

  // Spare files kept ready per data directory: a burst of this many CREATEs never waits for
  // an inode allocation.
  static constexpr size_t kSpareDepth = 8;
  // Damaged block files a start keeps in damaged/ for examination (the newest).
  static constexpr size_t kMaxDamaged = 32;
  // Payload bytes the seals read back because the writes could not feed their checksums.
  uint64_t read_back_bytes() const { return read_back_bytes_.load(std::memory_order_relaxed); }
  // Spare files ready on device `dev` (0 without a pool: a test Env sees every call in order,
  // so the pool runs only over the POSIX one).
  size_t SparesReady(size_t dev) const;
  // Tests: rotate the journal past `bytes` instead of kJournalRotateBytes. Before Load.
  void SetJournalRotateBytes(uint64_t bytes) { journal_rotate_bytes_ = bytes; }


 private:
  const StoreOptions options_;
  // Index files (file_store_snapshot.cc): INDEX (store/index_snapshot.h) and the journal
  // (store/index_journal.h). A start reads INDEX and replays the journal over it, checks every
  // entry against its file while it walks the directories; then, after a crash, keeps both
  // (the journal's torn tail cut, the blocks it read in full appended), or else writes INDEX
  // anew from what it verified (unless INDEX already says exactly that) and empties the
  // journal (file_store_journal.cc). Commits and removals append to it; a clean close writes
  // INDEX from memory and empties it again. The files themselves are each device's IndexLog.
  std::vector<std::unique_ptr<IndexLog>> logs_;  // per device
  using JournalRead = IndexLog::JournalRead;
  void SaveSnapshots(const BlockLister& blocks);
  void SaveSnapshot(size_t dev, const BlockLister& blocks);
  void LoadSnapshot(size_t dev);
  // A block this start verified, for the INDEX it may write next: `e` is an element of
  // snapshot_ (from_snapshot), or an entry of a block read in full whose `ns` indexes
  // loaded_.namespaces.
  void NoteLoaded(uint32_t ns, const SnapshotEntry& e, bool from_snapshot);
  // What this start verified, as an INDEX.
  IndexSnapshot Verified() const;
  void StartJournal(size_t dev);
  // Keeps JOURNAL as the start found it (its torn tail cut) and appends the entries read in
  // full; false if that failed (then INDEX is written instead).
  bool KeepJournal(size_t dev);
  // Appends to the device's journal; a fold is due once it passed journal_rotate_bytes_.
  void Append(size_t dev, const JournalRecord& record);
  // Folds the journal into a new INDEX of `blocks` if it holds more than `limit` bytes (a
  // rotation). REQUIRES: the start's walk is done (the INDEX takes every indexed block as
  // checked).
  void FoldJournalPast(size_t dev, uint64_t limit, const BlockLister& blocks);
  std::atomic<bool> fold_due_{false};  // a journal passed journal_rotate_bytes_ (Append)
  // `fd`: the block file just published as `draft` (its stat gives what INDEX checks later).
  void JournalCommit(size_t dev, int fd, const BlockInfo& draft, const IndexKeys& keys,
                     const PayloadChecksums& sums);
  void JournalRemoval(size_t dev, const BlockAddress& address);
  // Past this many journal bytes a device's journal is folded into a new INDEX.
  static constexpr uint64_t kJournalRotateBytes = 64ull << 20;
  uint64_t journal_rotate_bytes_ = kJournalRotateBytes;
  // The block at `path` as the snapshot describes it, if the file is still that very file.
  // `name` in the directory `dir_fd` (if >= 0, else at `path`); `ns` indexes
  // snapshot_namespaces_ (-1: not in the snapshot). The address is left for the caller to set.
  // `taken`: the file's stat if it was already taken (StatAhead), else it is taken here.
  const SnapshotEntry* FromSnapshot(int dir_fd, const std::string& path, int64_t ns,
                                    const std::string& name, const Result<FileStat>* taken = nullptr);
  // Every field of `b` but the address's block name and `pinned`, from the entry.
  static void FillFromEntry(IndexedBlock& b, const SnapshotEntry& e);
  // The entry of a block read in full at start (the file's inode, size and ctime), if its
  // file can be stat'ed.
  std::optional<SnapshotEntry> EntryOfBlock(const BlockInfo& info, int dir_fd, const std::string& name);
  void LoadBlocks(size_t dev, FileStoreReport& report);
  // Calls `visit(tenant, ns)` for every namespace directory of `dir` with valid names; the
  // others are reported as ignored.
  void ForEachNamespaceDir(const DataDir& dir, FileStoreReport& report,
                           const std::function<void(const std::string&, const std::string&)>& visit);
  void LoadNamespace(size_t dev, const std::string& tenant, const std::string& ns,
                     FileStoreReport& report);
  void LoadQuarantine(size_t dev, FileStoreReport& report);
  std::set<std::string> LoadPins();
  // The epoch in EPOCH: 0 if there is none (a new directory), an error if it cannot be read.
  Result<uint64_t> ReadEpoch(const std::string& path);
  std::string PathIn(size_t dev, const BlockAddress& address) const;
  // The payload's checksums: what its writes fed, and the rest read back.
  Result<PayloadChecksums> ChecksumsOf(PendingPayload& p, uint64_t size);
  // Empties every directory's tmp/ and spare/ (start-up); how many reservations were dropped.
  uint64_t DropLeftovers(FileStoreReport& report);
  // A block file found damaged goes to damaged/ for examination instead of being deleted;
  // only the newest kMaxDamaged are kept there. Where it cannot be moved, it is deleted.
  // Says what became of it ("PATH moved to DAMAGED" or "PATH deleted ...").
  std::string SetAsideDamaged(size_t dev, const std::string& path);
  // The names in `dir`; none (and a line in the report, unless it is missing) if unreadable.
  std::vector<std::string> ListOrReport(const std::string& dir, FileStoreReport& report);
  // Reads and checks a block file; the BlockInfo it describes, or why not: kInvalidArgument if
  // the file is damaged (it can be deleted), kIoError if it could not be read (it is kept).
  Result<BlockInfo> ReadBlockInfo(const std::string& path, std::string& why);
  // Open and ReadHeld: the block's file opened and its header checked against `info`.
  Result<std::pair<Fd, BlockHeader>> OpenChecked(const BlockInfo& info, const StoredPayload* stored);

  // Verification after start (adr/0016, file_store_walk.cc). With verify_in_background and
  // one data directory whose INDEX checked out and whose journal needs no fold, Load indexes
  // the blocks INDEX and the journal name without looking at their files; the store's walk then
  // asks for every file of every namespace (NextWalkItem) and has each checked by the eager
  // start's rule, while VerifyBlock checks a block on demand by the same rule. snapshot_,
  // snapshot_table_ and snapshot_namespaces_ are kept (read-only) for both until EndWalk.
  bool CanVerifyLater() const;
  // Hands the namespaces of `dev` over at once, its blocks in parts (NextUnverified).
  void RestoreFromIndex(size_t dev, FileStoreReport& report);
  // The next part of the blocks INDEX and the journal name on the walk's device; false when
  // every live entry was handed over.
  bool NextUnverified(Found& part);
  // What Load found, handed over by NextFound: parts made while loading (namespaces, blocks
  // read or checked, quarantine), then the blocks restored unverified, straight from the
  // entries (a million of them are never copied into parts all at once).
  std::vector<Found> found_;
  size_t next_found_ = 0;
  struct UnverifiedCursor {
    bool active = false;
    // Per snapshot namespace: the (tenant, ns) found on disk, null if its directory is gone.
    std::vector<const std::pair<std::string, std::string>*> parts;
    std::vector<uint64_t> live;  // EntryTable::LiveBits
    size_t word = 0;
    uint64_t bits = 0;  // of live[word - 1], those not yet handed over
    std::string relative;
  };
  UnverifiedCursor unverified_;
  // With several devices, the blocks already found (tenant/ns/block): the same block in two
  // directories is kept once. Start-up only.
  std::unordered_set<std::string> found_names_;
  // The part that blocks found by LoadNamespace go to.
  Found& FoundPart(size_t dev);
  // Where the walk is: the namespace being listed, its names, and the current item's file.
  struct WalkCursor {
    size_t next_ns = 0;  // into walk_namespaces_
    std::string ns_path;
    int64_t snapshot_ns = -1;  // the namespace's index in the snapshot, -1 if none
    Fd dir;
    std::vector<std::string> names;
    size_t next_name = 0;
    std::string path;                        // the current item's file
    const SnapshotEntry* entry = nullptr;    // the current item's entry, if one names it
    std::optional<SnapshotEntry> found;      // ReadWalkItem: the file's stat, for the journal
    FileStoreReport report;                  // the problems found so far
  };
  // Moves the cursor to the next namespace; false when none is left.
  bool OpenNextWalkNamespace();
  // The names in a namespace directory for the walk; if it cannot be listed, the names of the
  // entries INDEX and the journal leave in it (`snapshot_ns`, -1 if none).
  std::vector<std::string> NamesToWalk(const std::string& ns_path, int64_t snapshot_ns,
                                       FileStoreReport& report);
  // The entry INDEX and the journal leave for `name` in snapshot namespace `ns`, or null.
  const SnapshotEntry* EntryNamed(uint32_t ns, const std::string& name) const;
  // The eager start's rule for a file an entry names: kSame if it is the file the entry saw
  // (stat of `name` in `dir_fd`, or of `path` if dir_fd < 0), else read in full. A block read
  // in full is appended to the journal; a problem goes to `problems`.
  Verdict Check(size_t dev, int dir_fd, const std::string& path, const BlockAddress& address,
                const SnapshotEntry& e, std::vector<std::string>& problems);
  size_t walk_dev_ = 0;  // the device the start's walk covers (one: adr/0016)
  std::vector<std::pair<std::string, std::string>> walk_namespaces_;  // (tenant, ns) to walk
  WalkCursor cursor_;  // the store's walk thread's only
  std::atomic<bool> walk_over_{true};  // no walk, or EndWalk ran (Append may rotate again)
  bool walk_started_ = false, walk_completed_ = false;  // set by Load and EndWalk
  SharedMutex walk_state_mu_;            // VerifyBlock (shared) against freeing the entries
  bool walk_state_ GUARDED_BY(walk_state_mu_) = false;  // the entries are there
  Mutex gate_problems_mu_;
  // What VerifyBlock found, for the walk's report.
  std::vector<std::string> gate_problems_ GUARDED_BY(gate_problems_mu_);

  std::set<std::string> pins_;  // relative paths pinned at start-up

  DeviceSet devices_;  // placement and isolation
  std::vector<std::shared_ptr<StoredPayload>> located_;  // per device, shared by its blocks
  Env& env_;  // options().env, or the POSIX one
  // backing_io "uring": serves every UringSource this store opens (so it outlives them).
  std::unique_ptr<UringReader> uring_;
  std::unique_ptr<SparePool> spares_;  // started by Load over the POSIX Env
  std::atomic<uint64_t> read_back_bytes_{0};
  // Start-up only: the snapshot of the directory being loaded and its journals' commits, in
  // the order read, and which of them is each block's.
  std::unordered_map<std::string, uint32_t> snapshot_namespaces_;  // "tenant/ns" -> index
  std::vector<SnapshotEntry> snapshot_;
  EntryTable snapshot_table_;
  // Start-up only, for the device being loaded: what was verified (the snapshot_ entries used,
  // by index, not copied; and the blocks read in full, with the namespaces walked), and
  // whether INDEX already says exactly that (read whole, no journal record, every entry used):
  // then it is kept.
  std::vector<uint32_t> used_;             // indexes into snapshot_
  std::vector<uint32_t> ns_of_snapshot_;   // snapshot namespace -> loaded_.namespaces index
  IndexSnapshot loaded_;                   // namespaces walked; entries read in full
  bool index_current_ = false;
  const bool stat_ahead_ = options_.env == nullptr;  // see StatAhead (file_store_load.cc)
  bool index_whole_ = false;          // INDEX was read and checked out
  JournalRead old_journal_, journal_;  // what LoadSnapshot found of JOURNAL.old and JOURNAL
};

}  // namespace gpucache
