// Medium: where a store's bytes live. The store (store/indexed_store.h) holds one by
// composition, as leveldb's DBImpl holds an Env: it decides everything (index, lifecycle,
// admission, eviction, quarantine) and asks the medium only to keep, find and drop bytes.
// MemoryMedium (store/memory_store.h) keeps them in memory, FileMedium (store/file_store.h) in
// block files over one or more data directories.
//
// The store calls a medium without holding its own lock, so a medium may do disk I/O in any
// method; SharesDevice is the exception (called under the store's lock, memory only). A medium
// answers; it never calls the store (what it finds at start-up it hands over in parts, Found;
// which blocks a lost device took with it it tells through IsolateDomain's answer).
//
// Thread safety: every method may be called from any thread concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "store/block_store.h"
#include "store/checksum.h"
#include "store/index_keys.h"
#include "store/io/uring_reader.h"
#include "store/pins_file.h"

namespace gpucache {

// Medium-owned state of an in-flight reservation (a temp file, a buffer).
class PendingPayload {
 public:
  virtual ~PendingPayload() = default;
};

// Medium-owned state of a committed or quarantined block, if any.
class StoredPayload {
 public:
  virtual ~StoredPayload() = default;
};

// Raw, unverified bytes of a committed payload; the store's reader verifies them.
class RawSource {
 public:
  virtual ~RawSource() = default;
  // Fills `out` from payload offset `offset`; kIoError on a short or failed read.
  virtual StatusCode ReadRaw(uint64_t offset, std::span<uint8_t> out) = 0;
  // After a read failed: whether the file now holds fewer bytes than a payload of
  // `payload_bytes` needs (then the failure was its end, not the device), and the sizes.
  // nullopt if it does not, if its size cannot be read, or where there is no file.
  virtual std::optional<FileCutShort> CutShort(uint64_t payload_bytes) {
    (void)payload_bytes;
    return std::nullopt;
  }
};

// What a medium found when it opened, for the log.
struct MediumReport {
  uint64_t epoch = 0;
  uint64_t blocks_loaded = 0;
  uint64_t blocks_skipped = 0;        // corrupt or truncated, deleted
  // Of blocks_skipped, per tenant: files under a block's name found damaged and set aside. The
  // store counts each as a checksum failure of its tenant, as it counts one found by a read.
  std::map<std::string, uint64_t> damaged;
  uint64_t reservations_dropped = 0;  // payloads of unfinished writes left by the previous run
  uint64_t quarantined = 0;           // quarantined blocks still awaiting reclaim
  uint64_t from_snapshot = 0;         // of blocks_loaded, known from an index snapshot
  // The background walk's report (adr/0016): named by INDEX or the journal but without a file
  // (forgotten), and how long the walk took.
  uint64_t missing = 0;
  uint64_t walk_ns = 0;
  std::vector<std::string> problems;  // one line per skipped file
};

// What checking the file of a block restored unverified found (adr/0016), by the rule of an
// eager start: the file the entry saw (kSame); another valid block file under the name, read in
// full (kReplaced, `info` is whole); a damaged one (kDamaged: it is deleted, never served); or
// none that can be read (kGone: missing, or EIO: forgotten, the file left where it is).
struct Verdict {
  enum class Kind : uint8_t { kSame, kReplaced, kDamaged, kGone };
  Kind kind = Kind::kSame;
  BlockInfo info;  // kReplaced
};

// How a medium reads committed payloads, for the daemon's log and its metrics (fs/metrics.h),
// which see a store only through its Medium.
struct MediumIoStats {
  std::string description;                // one line: what serves payload reads, and why
  std::optional<UringReaderStats> uring;  // the io_uring reader's counters, when it serves them
  // Payload reads of block files served by pread when no io_uring reader serves them (else
  // uring->pread_reads counts its own): every read, a client's, a RAM-tier copy's or one whose
  // bytes then fail their checksum.
  uint64_t pread_reads = 0;
  uint64_t read_back_bytes = 0;  // payload bytes seals read back: the writes could not feed their checksums
};

// A BlockInfo of the index's part of a block (no identity, checksum or state): what the store
// answers a stat with. The other way is a slice: a BlockInfo is an IndexedBlock.
BlockInfo BlockInfoOf(IndexedBlock block);

// An index of every committed block that a medium asks the store for (its INDEX at a clean
// close and when its journal is folded): the medium hands one over, the store adds each block
// under its lock (Add does no I/O), then calls Write without the lock. Calls go one way: the
// store fills what the medium gave it; the medium never calls the store.
class IndexWriter {
 public:
  virtual ~IndexWriter() = default;
  virtual void Add(const IndexedBlock& block, const StoredPayload* stored) = 0;
  // Writes what was added. REQUIRES: called once, after the last Add (what the medium does
  // after the index is written, e.g. let its journal grow again, happens here).
  virtual void Write() = 0;
};

// A part of what a medium found at start-up (Medium::NextFound), for the store to index: the
// loader returns what it found, part by part (a start restores millions: one lock a part, and
// the parts' buffers reused); it never calls into the store.
struct Found {
  struct Namespace {
    std::string tenant, ns;
    Owner owner;
  };
  struct Quarantined {  // a block a previous run took out of the namespace while it was open
    BlockInfo info;
    std::shared_ptr<StoredPayload> stored;
  };
  size_t expected_blocks = 0;  // about how many blocks are still to come: sizes the index once
  std::vector<Namespace> namespaces;  // before any of their blocks
  // blocks[0, count) are stored at `stored` (one per part). Unique: a medium with several
  // devices keeps one copy of a block found on two.
  std::vector<IndexedBlock> blocks;
  size_t count = 0;
  std::shared_ptr<StoredPayload> stored;
  // The blocks' files were not checked (adr/0016): the store checks each before its first use
  // (MediumUpkeep::VerifyBlock) and walks them all (MediumUpkeep::NextWalkItem). The store counts them in
  // the report (loaded, from a snapshot); the medium counts the others.
  bool unverified = false;
  std::vector<Quarantined> quarantined;
};

// What a medium does between a start and its last file checked, apart from serving: hands
// over what Load found, checks the files of blocks restored unverified (the walk of adr/0016,
// and a block's check before its first use), and folds its journal. The store drives each
// step; the medium never calls the store. The defaults are those of a medium that finds and
// checks nothing (MemoryMedium).
class MediumUpkeep {
 public:
  virtual ~MediumUpkeep() = default;

  // The next part of what Load found (`part`'s buffers are reused from one call to the next);
  // false once everything was handed over. The store calls it until false, right after Load.
  virtual bool NextFound(Found& part) {
    (void)part;
    return false;
  }
  // Whether commits and removals grew the medium's journal past the size at which it is folded
  // into a new INDEX (FoldJournal). Cheap: the store asks after every commit and removal.
  virtual bool JournalFoldDue() const { return false; }
  // Starts the fold: the index to fill and write, or null if another thread took it.
  virtual std::unique_ptr<IndexWriter> FoldJournal() { return nullptr; }
  // Checks the file of a block restored unverified (Found::unverified), as the walk does
  // (CheckWalkItem); the store settles the verdict. Any thread, while the walk runs.
  virtual Verdict VerifyBlock(const BlockAddress& address, const StoredPayload* stored) {
    (void)address;
    (void)stored;
    return {};
  }
  // --- The walk of verification after start (adr/0016), driven by the store's walk thread
  // (store/indexed_store_verify.cc) one file at a time: the medium names each file and checks
  // the one the store asks about; the store decides, under its lock, what a finding does to the
  // index.
  struct WalkItem {
    BlockAddress address;
    std::shared_ptr<StoredPayload> stored;  // where the file is
    // Set: INDEX or the journal names the file, the block restored unverified at this region.
    // Unset: no entry names it; it is read in full, as an eager start reads it.
    std::optional<uint64_t> region_id;
  };
  // What the store's walk counted, and how long it took, for the walk's report.
  struct WalkCounts {
    uint64_t loaded = 0, from_snapshot = 0, skipped = 0;
    uint64_t walk_ns = 0;
  };
  // Whether Load restored blocks unverified that a walk must check (then the store runs one).
  virtual bool WalkPending() const { return false; }
  // The next file of the walk; false once every namespace has been listed. One caller.
  virtual bool NextWalkItem(WalkItem& item) {
    (void)item;
    return false;
  }
  // The item NextWalkItem just gave, named by an entry: its file checked as VerifyBlock checks
  // one (kReplaced: read in full; the next start trusts it).
  virtual Verdict CheckWalkItem(const WalkItem& item) {
    (void)item;
    return {};
  }
  // The item NextWalkItem just gave, named by no entry, its address held by the store so that
  // nothing else writes there: the block its file holds, read in full (`info` whole). A damaged
  // file is set aside (kInvalidArgument); one that cannot be read now is left for the next
  // start (kIoError).
  virtual Result<BlockInfo> ReadWalkItem(const WalkItem& item) {
    (void)item;
    return StatusCode::kNotFound;
  }
  // The store indexed what ReadWalkItem returned: the next start trusts it.
  virtual void AdoptedWalkItem(const WalkItem& item) { (void)item; }
  // The walk is over: `completed` if every file was looked at (`missing`: the blocks named by
  // an entry whose file was not found, which the store forgot); false if the store stopped it
  // (its close). The walk's report, and the index the medium writes now if it folds its journal
  // (the index once the walk settled everything): the store fills and writes it before it
  // reports the walk done.
  struct WalkEnd {
    MediumReport report;
    std::unique_ptr<IndexWriter> index;  // null: nothing to write
  };
  virtual WalkEnd EndWalk(bool completed, std::span<const BlockAddress> missing, const WalkCounts& counts) {
    (void)completed;
    (void)missing;
    (void)counts;
    return {};
  }
};

class Medium {
 public:
  struct Sealed {
    PayloadChecksums checksums;
    std::shared_ptr<StoredPayload> stored;
  };
  struct Opened {
    std::unique_ptr<RawSource> source;
    PayloadChecksums checksums;
    Bytes identity;  // the canonical identity the medium holds for the block (GPCK)
  };
  // What the medium holds of a committed block beside its payload and the index does not keep.
  struct Held {
    Bytes identity;        // canonical (GPCK)
    std::string checksum;  // "xxh3-128:<hex>" of the whole payload
  };
  struct DeviceSpace {
    uint64_t free = 0;
    uint64_t total = 0;
    // How far below the space it keeps free the device already is (another writer took it):
    // room for a fill must make this up too, before `free` counts.
    uint64_t below_kept = 0;
  };

  virtual ~Medium() = default;

  // Called once, by the store that holds it: opens the medium and persists the epoch it starts
  // at (report.epoch). False, with a reason, if it cannot. What it found comes from
  // upkeep().NextFound.
  virtual bool Load(MediumReport& report, std::string& error) = 0;
  // Called once, by the store's destructor (a clean close): the index to save for a faster
  // next Load (the store fills and writes it), or null.
  virtual std::unique_ptr<IndexWriter> Close() { return nullptr; }
  // What the medium does between a start and its last file checked (MediumUpkeep); a medium
  // that finds and checks nothing at start has the one that does nothing.
  virtual MediumUpkeep& upkeep() {
    static MediumUpkeep nothing;  // stateless: shared by every such medium
    return nothing;
  }

  virtual StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) = 0;
  virtual StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) = 0;

  // --- A reservation's payload.
  virtual Result<std::shared_ptr<PendingPayload>> Prepare(const ReservationInfo& info) = 0;
  virtual Result<size_t> Write(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) = 0;
  virtual StatusCode Truncate(PendingPayload& p, uint64_t size) = 0;
  // Grows the payload to `size` bytes and, where the medium can, allocates them, so that the
  // writes that follow cannot meet a full device (a fill that declares its size).
  virtual StatusCode Allocate(PendingPayload& p, uint64_t size) { return Truncate(p, size); }
  // The free and total bytes of the device `p` is written to, read now; nullopt for a medium
  // without such a limit. Lets a full device be judged before anything is evicted for it.
  virtual std::optional<DeviceSpace> SpaceFor(const PendingPayload& p) {
    (void)p;
    return std::nullopt;
  }
  // Whether evicting a block stored as `stored` frees room on the device `p` is written to.
  // Called under the store's lock: memory only.
  virtual bool SharesDevice(const PendingPayload& p, const StoredPayload* stored) const {
    (void)p;
    (void)stored;
    return true;
  }
  // Computes checksums over the `size` payload bytes, persists, and publishes at the address.
  // `draft` holds every field but the checksum, its keys those of its identity (IndexKeysOf).
  // When it failed because reading the written payload back (for checksums the writes could not
  // feed) failed with an I/O error, `read_failed` says where, for the store to count and report
  // as a backing read error; untouched otherwise.
  virtual Result<Sealed> Seal(PendingPayload& p, const BlockInfo& draft,
                              std::optional<BlockLocation>& read_failed) = 0;
  virtual void Discard(PendingPayload& p) = 0;

  // --- Committed blocks. `info` carries no identity; the medium returns the one it holds, and
  // the store checks it.
  virtual Result<Opened> Open(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) = 0;
  // The canonical identity and payload checksum the medium holds for a committed block;
  // kChecksumMismatch if its bytes are gone or damaged.
  virtual Result<Held> ReadHeld(const BlockInfo& info,
                                const std::shared_ptr<StoredPayload>& stored) = 0;
  // Moves a block's bytes out of the namespace but keeps them; returns the new medium state.
  virtual std::shared_ptr<StoredPayload> Quarantine(const BlockInfo& info,
                                                    const std::shared_ptr<StoredPayload>& stored) = 0;
  // Frees a block's bytes (committed or quarantined). kIoError if they stay under the block's
  // name (neither removed nor moved aside: a read-only filesystem), where the next start
  // would load the block again; kOk otherwise.
  virtual StatusCode Drop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) = 0;
  // Whether a block's bytes Quarantine returned stayed under its name (it could neither move
  // nor remove them): the next start would load the block again.
  virtual bool KeptUnderName(const StoredPayload* quarantined) const {
    (void)quarantined;
    return false;
  }
  // After an invalidation took a committed block out (Drop or Quarantine): makes its name's
  // removal survive a power cut where the medium promises that for commits (a block the
  // engine called wrong must not come back as a hit). kOk where there is nothing to do.
  virtual StatusCode MakeRemovalDurable(const BlockInfo& info, const StoredPayload* stored) {
    (void)info;
    (void)stored;
    return StatusCode::kOk;
  }
  // Takes a committed block's damaged bytes out of the namespace, kept for examination where
  // the medium can keep them (else dropped); says where they went, for the operator's log.
  virtual std::string SetAside(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) {
    (void)Drop(info, stored);
    return {};
  }

  virtual StatusCode PersistEpoch(uint64_t epoch) = 0;
  // Saves the pinned set, each data directory in service the pins of the blocks it holds; a
  // write that fails is counted (metadata_errors), that directory's previous set then staying
  // (store/pins_file.h).
  virtual void PersistPins(const std::vector<PinnedBlock>& pinned) = 0;

  // Fault domains (data directories), for media that have several. IsolateDomain takes the
  // one at `path` out of service and sets `lost` to tell the blocks stored there, which the
  // store then forgets (without touching their bytes: the device is gone).
  using StoredTest = std::function<bool(const StoredPayload*)>;
  virtual StatusCode IsolateDomain(const std::string& path, StoredTest& lost) {
    (void)path;
    (void)lost;
    return StatusCode::kNotSupported;
  }
  virtual std::vector<DomainInfo> Domains() { return {}; }
  // Where a block's bytes are (`stored`: its medium state, null for a block not committed,
  // placed as a new one would be), for tools and tests; empty if nowhere.
  virtual std::string PathOf(const BlockAddress& address, const StoredPayload* stored) {
    (void)address;
    (void)stored;
    return {};
  }

  // The data directory and file of a committed block (`stored`: its medium state); empty
  // strings where the medium has none. Safe concurrently with anything.
  virtual BlockLocation LocationOf(const BlockAddress& address, const StoredPayload* stored) {
    (void)address;
    (void)stored;
    return {};
  }

  // How payload reads are served, read now (safe concurrently with reads).
  virtual MediumIoStats IoStats() const = 0;

  // Renames and unlinks of block files that failed where no caller could hear it (a move into
  // quarantine, an unlink of an evicted block).
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  // Writes of the metadata a start reads (the journal, INDEX, PINS) that failed: the next start
  // checks more files, or a pin change was refused.
  uint64_t metadata_errors() const { return metadata_errors_.load(std::memory_order_relaxed); }

 protected:
  void CountError() { errors_.fetch_add(1, std::memory_order_relaxed); }
  void CountMetadataError() { metadata_errors_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> errors_{0}, metadata_errors_{0};
};

}  // namespace gpucache
