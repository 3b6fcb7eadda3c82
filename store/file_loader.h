// FileLoader: what a start of FileMedium (store/file_store.h) finds in its data directories,
// handed over in parts (Medium::NextFound); and, for a start that verifies later (adr/0016),
// the walk over the files of the blocks it handed over unchecked.
//
// A start empties the leftovers of the last run (tmp/, spare/), reads each directory's INDEX
// and replays its journal over it (the files are the device's IndexLog, store/index_log.h).
// An eager start then lists every namespace and checks every file by one rule: the file an
// entry saw (inode, size and ctime) is trusted, another is read in full, a damaged one is set
// aside, one that cannot be read is left in place for the next start. It then keeps the journal
// or writes INDEX anew from what it verified. A start that verifies later hands the entries'
// blocks over unchecked and keeps the entries; the store's walk then has every file checked by
// the same rule (file_loader_walk.cc), and VerifyBlock checks one block before its first use.
//
// FileMedium calls it, and it never calls back: a block it had to read in full comes back as the
// journal record that names it, for FileMedium to append (FileMedium owns the journal's appends
// and folds). Every file operation goes through Env.
//
// Thread safety: the start's thread, then the store's walk thread, call it one at a time;
// VerifyBlock may be called from any thread meanwhile.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/device_set.h"
#include "store/env.h"
#include "store/index_journal.h"
#include "store/index_log.h"
#include "store/index_snapshot.h"
#include "store/medium.h"
#include "store/mutex.h"
#include "store/pins_file.h"
#include "store/posix_io.h"

namespace gpucache {

class FileLoader {
 public:
  // `located`: per device, the medium state its blocks share. `stat_ahead`: stat a namespace's
  // files on a helper thread (only over the POSIX Env: a test Env sees its calls in order).
  FileLoader(Env& env, const DeviceSet& devices,
             std::span<const std::shared_ptr<StoredPayload>> located,
             std::span<const std::unique_ptr<IndexLog>> logs, bool stat_ahead);
  FileLoader(const FileLoader&) = delete;
  FileLoader& operator=(const FileLoader&) = delete;

  // Loads every device: leftovers dropped (counted in `report`), pins read, INDEX and the
  // journal read, the blocks found. With `verify_later` and one device whose INDEX checked out
  // and whose journal needs no fold, its blocks are restored from the entries unchecked: the
  // device the walk must cover is returned. `journal_rotate_bytes`: past half of it, a start
  // folds the journal rather than keeping it.
  std::optional<size_t> Load(MediumReport& report, bool verify_later, uint64_t journal_rotate_bytes);
  // Medium::NextFound.
  bool NextFound(Found& part);
  // Deletes what a reservation left in tmp/ and spare/ (counted in reservations_dropped), once:
  // Load does it unless the medium did first (before it writes EPOCH, which a full disk of
  // such leftovers would refuse).
  void DropLeftovers(MediumReport& report);

  // The walk (Medium's walk calls; file_loader_walk.cc). A block read in full because its file
  // is not the one its entry saw is named in `read`, to be appended to the walk's journal.
  Verdict VerifyBlock(const BlockAddress& address, const std::string& path,
                      std::optional<JournalRecord>& read);
  bool NextWalkItem(MediumUpkeep::WalkItem& item);
  Verdict CheckWalkItem(const MediumUpkeep::WalkItem& item, std::optional<JournalRecord>& read);
  Result<BlockInfo> ReadWalkItem(const MediumUpkeep::WalkItem& item);
  // The record that names the file ReadWalkItem read, once the store indexed it.
  std::optional<JournalRecord> AdoptedWalkItem(const MediumUpkeep::WalkItem& item);
  // Ends the walk: its report (the counts and problems, if `completed`); the entries are freed.
  MediumReport EndWalk(bool completed, const MediumUpkeep::WalkCounts& counts);
  // Bytes the start's lists still hold (the snapshot's entries, which of them were used, the
  // entries read in full, the parts not handed over): none once the walk ended or an eager
  // load was handed over, so that what a daemon keeps resident is its index alone.
  size_t HeldBytes() const;
  // Writes of the metadata a start reads that this start could not make (a JOURNAL it could not
  // keep): the medium counts them (Medium::metadata_errors).
  uint64_t MetadataErrors() const { return metadata_errors_; }

 private:
  // Why a file in a namespace directory is not loaded, and what became of it: a name a block
  // cannot have is not gpucache's and stays where it is (adr/0017: only our own files are
  // removed); a block file that does not check out is set aside in damaged/; one that cannot be
  // read now (EIO) stays for the next start.
  std::string SkippedBecause(const std::string& name, const std::string& why, StatusCode status,
                             size_t dev, const std::string& path);
  // Start-up (file_loader.cc).
  void ReportCutJournal(size_t dev, MediumReport& report);
  PinsFile LoadPins();
  void LoadSnapshot(size_t dev);
  void LoadBlocks(size_t dev, MediumReport& report);
  void LoadNamespace(size_t dev, const std::string& tenant, const std::string& ns, MediumReport& report);
  void LoadQuarantine(size_t dev, MediumReport& report);
  // Keeps the journal or writes INDEX from what this start verified (see the .cc).
  void StartJournal(size_t dev, uint64_t journal_rotate_bytes);
  // The journal of a start that verifies later, kept; if it cannot be, counted and reported.
  void KeepJournalForWalk(size_t dev, MediumReport& report);
  // Keeps JOURNAL as the start found it (its torn tail cut) and appends the entries read in
  // full; false if that failed (then INDEX is written instead).
  bool KeepJournal(size_t dev);
  void DropSnapshot();
  // Calls `visit(tenant, ns)` for every namespace directory of `dir` with valid names; the
  // others are reported as ignored.
  void ForEachNamespaceDir(const DataDir& dir, MediumReport& report,
                           const std::function<void(const std::string&, const std::string&)>& visit);
  // The names in `dir`; none (and a line in the report, unless it is missing) if unreadable.
  std::vector<std::string> ListOrReport(const std::string& dir, MediumReport& report);
  // The block at `path` as the snapshot describes it, if the file is still that very file.
  // `name` in the directory `dir_fd` (if >= 0, else at `path`); `ns` indexes
  // snapshot_namespaces_ (-1: not in the snapshot). `taken`: the file's stat if it was already
  // taken (StatAhead), else it is taken here.
  const SnapshotEntry* FromSnapshot(int dir_fd, const std::string& path, int64_t ns,
                                    const std::string& name, const Result<FileStat>* taken = nullptr);
  // The entry of a block read in full (`checksum` as in BlockInfo; the file's inode, size and
  // ctime), if its file can be stat'ed.
  std::optional<SnapshotEntry> EntryOfBlock(const IndexedBlock& b, std::string_view checksum, int dir_fd,
                                            const std::string& name);
  // A block this start verified, for the INDEX it may write next: `e` is an element of
  // snapshot_ (from_snapshot), or an entry of a block read in full whose `ns` indexes
  // loaded_.namespaces.
  void NoteLoaded(uint32_t ns, const SnapshotEntry& e, bool from_snapshot);
  // What this start verified, as an INDEX.
  IndexSnapshot Verified() const;
  // The part that blocks found by LoadNamespace go to.
  Found& FoundPart(size_t dev);

  // Verification after start (file_loader_walk.cc).
  bool CanVerifyLater() const;
  // Hands the namespaces of `dev` over at once, its blocks in parts (NextUnverified).
  void RestoreFromIndex(size_t dev, MediumReport& report);
  // The next part of the blocks INDEX and the journal name on the walk's device; false when
  // every live entry was handed over.
  bool NextUnverified(Found& part);
  // Moves the cursor to the next namespace; false when none is left.
  bool OpenNextWalkNamespace();
  // The names in a namespace directory for the walk; if it cannot be listed, the names of the
  // entries INDEX and the journal leave in it (`snapshot_ns`, -1 if none).
  std::vector<std::string> NamesToWalk(const std::string& ns_path, int64_t snapshot_ns, MediumReport& report);
  // The entry INDEX and the journal leave for `name` in snapshot namespace `ns`, or null.
  const SnapshotEntry* EntryNamed(uint32_t ns, const std::string& name) const;
  // The eager start's rule for a file an entry names: kSame if it is the file the entry saw
  // (stat of `name` in `dir_fd`, or of `path` if dir_fd < 0), else read in full (and named in
  // `read`). A problem goes to `problems`.
  Verdict Check(int dir_fd, const std::string& path, const BlockAddress& address, const SnapshotEntry& e,
                std::vector<std::string>& problems, std::optional<JournalRecord>& read);

  Env& env_;
  const DeviceSet& devices_;
  const std::span<const std::shared_ptr<StoredPayload>> located_;
  const std::span<const std::unique_ptr<IndexLog>> logs_;
  const bool stat_ahead_;
  PinsFile pins_;  // the pins of every data directory
  uint64_t metadata_errors_ = 0;  // Load's thread only
  bool leftovers_dropped_ = false;  // DropLeftovers ran

  // The snapshot of the directory being loaded and its journals' commits, in the order read,
  // and which of them is each block's. Kept (read-only) for the walk until EndWalk.
  std::unordered_map<std::string, uint32_t> snapshot_namespaces_;  // "tenant/ns" -> index
  std::vector<SnapshotEntry> snapshot_;
  EntryTable snapshot_table_;
  // For the device being loaded: what was verified (the snapshot_ entries used, by index, not
  // copied; and the blocks read in full, with the namespaces walked), and whether INDEX already
  // says exactly that (read whole, no journal record, every entry used): then it is kept.
  std::vector<uint32_t> used_;            // indexes into snapshot_
  std::vector<uint32_t> ns_of_snapshot_;  // snapshot namespace -> loaded_.namespaces index
  IndexSnapshot loaded_;                  // namespaces walked; entries read in full
  bool index_current_ = false;
  bool index_whole_ = false;  // INDEX was read and checked out
  IndexLog::JournalRead old_journal_, journal_;  // what LoadSnapshot found of JOURNAL.old and JOURNAL

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
  // directories is kept once.
  std::unordered_set<std::string> found_names_;

  // Where the walk is: the namespace being listed, its names, and the current item's file.
  struct WalkCursor {
    size_t next_ns = 0;  // into walk_namespaces_
    std::string ns_path;
    int64_t snapshot_ns = -1;  // the namespace's index in the snapshot, -1 if none
    Fd dir;
    std::vector<std::string> names;
    size_t next_name = 0;
    std::string path;                      // the current item's file
    const SnapshotEntry* entry = nullptr;  // the current item's entry, if one names it
    std::optional<SnapshotEntry> found;    // ReadWalkItem: the file's stat, for the journal
    MediumReport report;                   // the problems found so far
  };
  size_t walk_dev_ = 0;  // the device the walk covers (one: adr/0016)
  std::vector<std::pair<std::string, std::string>> walk_namespaces_;  // (tenant, ns) to walk
  WalkCursor cursor_;  // the store's walk thread's only
  SharedMutex walk_state_mu_;  // VerifyBlock (shared) against freeing the entries
  bool walk_state_ GUARDED_BY(walk_state_mu_) = false;  // the entries are there
  Mutex gate_problems_mu_;
  // What VerifyBlock found, for the walk's report.
  std::vector<std::string> gate_problems_ GUARDED_BY(gate_problems_mu_);
};

}  // namespace gpucache
