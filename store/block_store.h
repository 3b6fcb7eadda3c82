// The store contract: what every block store promises (MemoryStore, and the store that
// OpenFileStore opens over FileMedium).
//
// Writers follow the commit protocol: Reserve (exclusive, the single-flight point) ->
// SetIdentity -> Write... -> Commit, or Abort. Readers Stat or Lookup and then Open a
// committed block; every byte a BlockReader returns was checked against the stored checksums
// first. A block that fails its check is dropped from the namespace: the read fails with
// kChecksumMismatch and the next lookup is a clean miss.
//
// Lookup answers hit / prefix-hit / miss-with-reason and never returns payload bytes.
//
// Thread safety: every BlockStore method may be called from any thread concurrently. A
// BlockReader may be used by several threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/eviction/eviction_policy.h"
#include "store/identity.h"
#include "store/index_keys.h"
#include "store/layout.h"
#include "store/lifecycle.h"
#include "store/limits.h"
#include "store/status.h"

namespace gpucache {

// The last epoch a store may be in: region ids are `epoch << 32 | sequence` and the index keeps
// a block's commit epoch in 32 bits, so a larger one would give ids an earlier epoch gave. At
// a fence a second that is 136 years away; an EPOCH file that says more is damaged or planted.
inline constexpr uint64_t kLastEpoch = (uint64_t{1} << 32) - 1;

class Env;  // store/env.h

struct Owner {
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool operator==(const Owner&) const = default;
};

// A committed block's metadata: the one shape of it. The index keeps this much in memory (no
// identity bytes, only their IndexKeys; no payload checksum); INDEX, the journal and the block
// file's header are its on-disk forms (store/index_entry.h, store/block_file.h).
struct IndexedBlock {
  BlockAddress address;
  uint64_t size = 0;  // payload bytes
  uint64_t commit_epoch = 0;
  uint64_t region_id = 0;
  Owner owner;
  uint64_t commit_time_ns = 0;  // CLOCK_REALTIME at commit
  IndexKeys keys;  // keys.identity is not kept by the index (0 when read from it)
  bool pinned = false;  // never evicted (explicit invalidation still works)
};

// The same block with what only the medium holds (read back from the block file's header):
// returned by Stat and BlockReader::info(). StatAttributes, Probe and the quarantine's copies
// fill the IndexedBlock part and the state only.
struct BlockInfo : IndexedBlock {
  CacheIdentity identity;
  Bytes canonical_identity;  // GPCK bytes, as set through the identity xattr
  std::string checksum;      // "xxh3-128:<hex>" of the whole payload (Stat, Open only)
  BlockState state = BlockState::kCommitted;
  uint32_t open_handles = 0;  // readers holding it open, which keep it from eviction (Stat, StatAttributes)
};

using ReservationId = uint64_t;

// A `.part` file's view of its reservation.
struct ReservationInfo {
  ReservationId id = 0;
  BlockAddress address;
  Owner owner;
  BlockState state = BlockState::kReserved;  // RESERVED or WRITING
  uint64_t size = 0;                         // highest byte written + 1
  uint64_t region_id = 0;
  uint64_t epoch = 0;                        // epoch the reservation was admitted in (<= kLastEpoch)
  uint64_t create_time_ns = 0;
  uint64_t modify_time_ns = 0;  // the last write or truncate (the .part's mtime and ctime)
};

enum class MissReason : uint8_t { kAbsent, kIncompatible, kQuarantined, kFenced };
std::string_view ToString(MissReason reason);

struct LookupResult {
  enum class Kind : uint8_t { kHit, kPrefixHit, kMiss };
  Kind kind = Kind::kMiss;
  MissReason reason = MissReason::kAbsent;  // meaningful for kMiss only
  BlockAddress address;                     // the block to open, for kHit and kPrefixHit
  uint32_t valid_length = 0;                // tokens in that block
};
std::string_view ToString(LookupResult::Kind kind);

struct TenantCounters {
  Usage usage;                      // what the tenant holds now
  uint64_t hits = 0;                // exact hits (path probes and lookups)
  uint64_t prefix_hits = 0;
  uint64_t misses = 0;               // all misses; the next three explain some of them
  uint64_t misses_incompatible = 0;
  uint64_t misses_quarantined = 0;
  uint64_t misses_fenced = 0;
  uint64_t commits = 0;
  uint64_t checksum_failures = 0;
  uint64_t evictions = 0;           // blocks evicted to make room or by an admin
  uint64_t invalidations = 0;       // blocks unlinked by a client
  uint64_t quarantined = 0;         // blocks that entered quarantine
  uint64_t reclaimed = 0;           // quarantined blocks freed
  uint64_t fenced = 0;              // reservations fenced by an epoch bump
  uint64_t expired = 0;             // reservations abandoned past their lease
};

struct MediumReport;  // store/medium.h

struct StoreStats {
  uint64_t epoch = 0;
  bool draining = false;
  uint64_t medium_errors = 0;  // renames and unlinks of block files that failed unheard
  // Blocks restored from INDEX and the journal whose files the start's background walk has not
  // checked yet (adr/0016); 0 once it finished. While it is not 0, usage and these counters
  // are exact only after the walk (docs/reliability.md, "Start-up").
  uint64_t blocks_unverified = 0;
  bool verify_walk_running = false;
  std::map<std::string, TenantCounters> tenants;
  uint64_t metadata_errors = 0;  // writes of the journal, INDEX and PINS that failed
  // Fences the store made itself, its epoch having given out its region ids (StoreFills::Reserve).
  uint64_t automatic_fences = 0;
  // Reads of block files that failed with an I/O error or found the file cut short, by any
  // reader, at an open or a commit's read-back (BackingReadErrorObserver).
  uint64_t read_errors = 0;
  // Indexed blocks whose file was found gone at an open (StoreCore::ReportVanished).
  uint64_t files_missing = 0;
};

struct StoreOptions {
  ResourceLimits limits;
  // Flush payload and header to stable storage before publishing. Off by default: a block
  // lost or torn by a power cut fails its checksums and becomes a clean miss either way.
  bool sync_commits = false;
  // The share of each data directory's filesystem (0..50 %) fills leave free for everything
  // else on it: a write or allocation that would take the filesystem's available bytes below it
  // fails as on a full device, so the store evicts from that device for it, or refuses it with
  // ENOSPC (docs/eviction.md, "A full disk"). 0: fill the device to the end. The library's
  // default is 0; the daemon's (`limits.min_free_percent`) is 5.
  double min_free_percent = 0;
  // The file operations of the commit path (FileMedium); null means the POSIX ones. Borrowed:
  // must outlive the store. Tests put a fault-injecting Env here (tests/support/fault_env.h).
  Env* env = nullptr;
  std::string eviction_policy{kDefaultPolicy};  // a name from PolicyNames()
  // A reservation whose writers all closed is abandoned when not committed within this.
  uint64_t reservation_lease_ns = 30ull * 1000 * 1000 * 1000;
  // How FileMedium reads committed payloads: "posix" (pread through the page cache) or "uring"
  // (store/io/: io_uring into registered buffers, O_DIRECT where the filesystem allows it, pread
  // on tmpfs and wherever io_uring is refused). Anything else is refused at open.
  std::string backing_io = "posix";
  // FileMedium's start-up (adr/0016). false: every block file is checked against INDEX and the
  // journal (inode, size, ctime) before OpenFileStore returns. true: the store opens from INDEX
  // and the journal alone; each block is checked before its first use, and a background walk
  // checks the rest with the same rule. The library's default is the old behaviour; the daemon's
  // (`verify_blocks`, docs/configuration.md) is the new one.
  bool verify_in_background = false;
  // The background walk's thread is started by StartBackgroundWork() instead of by the start:
  // a daemon that detaches forks after opening the store, and a thread started before the fork
  // is not in the child (the walk never finished and every namespace listing waited for it).
  bool defer_background_work = false;
  // FileMedium folds a data directory's journal into a new INDEX past this many bytes; 0: its
  // default (64 MiB). Tests make it small.
  uint64_t journal_rotate_bytes = 0;
  // Tests: runs on the background walk's thread before it looks at any file (to hold it).
  std::function<void()> before_walk;
  // Runs on the walk's thread once it finished, with what it found (the daemon logs it).
  std::function<void(const MediumReport&)> walk_finished;
  // Tests: runs between two slices of a listing's pass (ListEntries), outside the lock.
  std::function<void()> between_list_slices;
  // Tests: how many fills one epoch gives region ids to before the store fences itself into the
  // next (0: ReservationTable::kRegionSequenceLimit, about 4 billion).
  uint64_t region_ids_per_epoch = 0;
};

// What a single-flight joiner can learn about a fill it did not lead.
enum class FillState : uint8_t { kPending, kFinished, kFailed, kFenced };
std::string_view ToString(FillState state);

// A block out of the namespace whose bytes may still be in use.
struct QuarantineInfo {
  uint64_t region_id = 0;
  BlockAddress address;
  uint64_t size = 0;
  std::string reason;         // "evicted", "invalidated", "restart"
  uint64_t since_epoch = 0;   // epoch when it entered quarantine
  int open_handles = 0;
};

enum class DrainAction : uint8_t { kStart, kFinish, kRollback };

// A fault domain: one data directory (one device).
struct DomainInfo {
  std::string path;
  bool isolated = false;
};

// A namespace directory's attributes.
struct NamespaceInfo {
  Owner owner;
  // When a block or a fill in it last came or went (CLOCK_REALTIME ns): the directory's mtime,
  // as tools that compare times (make, rsync) expect. A start restores the newest commit time
  // of its blocks (departures since are not persisted); 0 if nothing is known.
  uint64_t change_time_ns = 0;
};

// Why a committed block left the namespace behind the kernel's back.
enum class RemovalReason : uint8_t { kEvicted, kCorrupt, kLost };
std::string_view ToString(RemovalReason reason);

// Called (without any store lock held) when a committed block leaves the namespace for a
// reason the kernel could not see: eviction, an admin request, corruption found on read, a
// device taken out of service. `detail` says, for a corrupt block, what failed and where its
// file went (for the operator's log); it is empty otherwise.
using RemovalObserver = std::function<void(const BlockAddress&, RemovalReason, std::string_view detail)>;
// Called (without any store lock held, on the committing thread) after a block is published.
// Must be cheap: it delays the writer's commit reply (the cold tier only queues the address).
using CommitObserver = std::function<void(const BlockAddress&)>;
// Called (without any store lock held, on the invalidating thread) after a committed block was
// invalidated: the engine unlinked it, its way to say "this block is wrong". `checksum` is the
// payload's, as the block's header gave it. Must be cheap (the cold tier only notes it, and
// withdraws the block's cold copy later: docs/cold-tier.md, "Invalidated blocks").
using InvalidationObserver = std::function<void(const BlockAddress&, const std::string& checksum)>;
// A fence the store made itself because its epoch gave out its region ids (StoreFills::Reserve):
// the daemon logs it, as the fills it fenced hear ESTALE with no operator's fence to explain it.
struct AutomaticFence {
  uint64_t from_epoch = 0;
  uint64_t epoch = 0;                 // the new one
  uint64_t fills_fenced = 0;          // fills open at the fence: their writers hear ESTALE
  uint64_t region_ids_per_epoch = 0;  // what the old epoch gave out
};
// Called on the thread whose fill found the ids used up, with no store lock held but the one
// that serializes fences: it must not fence.
using AutomaticFenceObserver = std::function<void(const AutomaticFence&)>;

// Where an open block's bytes are read from: for the log line of a read that failed, so that
// the operator learns which device fails (BackingReadErrorObserver).
struct BlockLocation {
  size_t device = 0;     // the data directory's place in the configuration (0: the only one)
  std::string data_dir;  // empty: not on a data directory (in memory)
  std::string file;      // the block file as it was opened (or, at a commit, as it is written)
};
// A block file holding fewer bytes than its block needs: its header's data offset plus the
// payload length (`needed`), against its size when a read failed (`has`).
struct FileCutShort {
  uint64_t needed = 0;
  uint64_t has = 0;
};
// A read of a block file that failed (BackingReadErrorObserver): a payload read by any reader,
// the open of a committed block (its file and header, read at each open), or a commit's read-back
// of what it wrote (`where.file` is then the file being sealed).
struct BackingReadError {
  BlockAddress address;
  BlockLocation where;
  // Set when the read failed because the file is shorter than the block needs (a read past its
  // end fails as an I/O error does): cut short after it was opened, which no device error does.
  std::optional<FileCutShort> cut_short;
};
// Called when such a read fails with an I/O error, whoever reads: a client, the RAM tier's
// copy, the cold tier's pack (each through a BlockReader), an open, a commit, so that the log
// names the failing device whichever reader met it. On the reader's thread, with no store lock
// held.
using BackingReadErrorObserver = std::function<void(const BackingReadError&)>;

// An open committed block. Reads are verified chunk by chunk before any byte is returned.
class BlockReader {
 public:
  virtual ~BlockReader() = default;
  virtual const BlockInfo& info() const = 0;
  // Reads up to out.size() bytes at `offset` (short at the end of the payload). On a checksum
  // mismatch returns kChecksumMismatch, counts it, and removes the block from the namespace.
  virtual Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) = 0;
};

// The contract in three roles, by what callers need: a writer (BlockFills), a reader
// (BlockReads), the daemon's upkeep and the operator (BlockAdmin). A caller that needs one role
// takes that one (the cold tier's refill a BlockFills&, the RAM promoter a BlockReads&); a
// BlockStore is all three. The roles are virtual bases, so one store object implements each
// exactly once.

// Writing: namespaces and the commit protocol, and what a writer may ask about its fill.
class BlockFills {
 public:
  virtual ~BlockFills() = default;

  // Namespaces: directories that group blocks sharing every byte-affecting field.
  // CreateNamespace checks the names (kInvalidArgument if bad); REQUIRES for the others (and
  // for BlockReads' namespace methods): IsValidTenantName(tenant).
  virtual StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) = 0;
  // kNotEmpty while it holds a block or reservation.
  virtual StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) = 0;

  // The commit protocol.
  // kNotFound if the namespace does not exist; kExists if the block is committed or already
  // reserved (the single-flight join).
  virtual Result<ReservationId> Reserve(const BlockAddress& address, Owner owner) = 0;
  // The same, for a fill the daemon writes itself on the owner's behalf (a cold refill, a
  // commit frame): FillFor never gives it to anyone, so no open, truncate, unlink or rename of
  // its `.part` through the mount can add bytes the daemon did not verify, or commit it early.
  virtual Result<ReservationId> ReserveForDaemon(const BlockAddress& address, Owner owner) = 0;
  // Stores the canonical identity bytes; they are checked at Commit, not here, so a bad
  // identity fails the commit (and changes nothing).
  virtual StatusCode SetIdentity(ReservationId id, std::span<const uint8_t> canonical) = 0;
  virtual Result<Bytes> GetIdentity(ReservationId id) = 0;
  virtual Result<size_t> Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) = 0;
  // Writes `data` at the end of the payload as the store knows it (O_APPEND).
  virtual Result<size_t> Append(ReservationId id, std::span<const uint8_t> data) = 0;
  // Sets the size of a reservation's payload (truncate of a `.part`); growing declares the
  // size, and the room for it is found or refused now.
  virtual StatusCode Truncate(ReservationId id, uint64_t size) = 0;
  // A writer holds the reservation open; Commit refuses with kBusy until every writer is done.
  virtual StatusCode OpenWriter(ReservationId id) = 0;
  virtual void CloseWriter(ReservationId id) = 0;
  // Validates identity (decodes, matches the address and tenant), size and writers; computes
  // checksums; makes the block durable enough to be verified after a restart; publishes it.
  // On kInvalidArgument, kTooLarge or kBusy the reservation is kept so the writer can fix it.
  virtual StatusCode Commit(ReservationId id) = 0;
  // After Commit said kInvalidArgument: which of its checks failed, in one line for the log.
  virtual std::string ExplainInvalidCommit(ReservationId id) = 0;
  virtual StatusCode Abort(ReservationId id) = 0;
  virtual Result<ReservationInfo> StatReservation(ReservationId id) = 0;
  virtual std::optional<ReservationId> FindReservation(const BlockAddress& address) = 0;
  // The fill of `address` that the caller with `uid` may act on (its filler's; nullopt: an
  // admin's, anyone's), found and checked under one lock: kNotFound if there is none (a fence
  // ended it, or it finished), kBusy if it is another's or the daemon's (ReserveForDaemon). What every change to a `.part` asks
  // first; the call that makes the change checks the fill's state again (fenced, sealing).
  virtual Result<ReservationId> FillFor(const BlockAddress& address, std::optional<uint32_t> uid) = 0;

  // The outcome of the latest fill of `address`, if remembered.
  virtual std::optional<FillState> FillOutcome(const BlockAddress& address) = 0;
  // True while a fill of `address` fenced less than a reservation lease before `now_ns` is
  // remembered: its writer may still be about to commit, and must hear ESTALE.
  virtual bool RecentlyFenced(const BlockAddress& address, uint64_t now_ns) = 0;
  // Abandons reservations idle past their lease; returns how many. Called periodically.
  virtual size_t ExpireReservations(uint64_t now_ns) = 0;
};

// Reading: namespaces and committed blocks, verified on the way out.
class BlockReads {
 public:
  virtual ~BlockReads() = default;

  // Owner and change time of an existing namespace, or kNotFound.
  virtual Result<NamespaceInfo> StatNamespace(std::string_view tenant, std::string_view ns) = 0;
  virtual std::vector<std::string> ListNamespaces(std::string_view tenant) = 0;
  // Names of committed blocks, then reservations with their ".part" suffix.
  virtual std::vector<std::string> ListEntries(std::string_view tenant, std::string_view ns) = 0;
  // Every indexed block of `tenant`, in every namespace, in no order, handed to `visit` outside
  // the store's lock (it may call the store); `visit` returns false to stop. One pass over the
  // index, however many namespaces (ListEntries per namespace is a pass each). A block committed
  // or removed during the pass may or may not be visited, one removed and committed again may
  // be visited twice; every other block is visited once.
  virtual void VisitBlocks(std::string_view tenant,
                           const std::function<bool(const BlockAddress&)>& visit) = 0;

  // The whole BlockInfo, identity included (read back from the medium and checked).
  virtual Result<BlockInfo> Stat(const BlockAddress& address) = 0;
  // Stat from memory alone: every field but `identity`, `canonical_identity` and `checksum`
  // (left empty: the medium holds them, in the block file's header). What attributes
  // (getattr, lookup) need; no I/O.
  virtual Result<BlockInfo> StatAttributes(const BlockAddress& address) = 0;
  // StatAttributes that counts a hit or a miss for the block's tenant (a path probe).
  virtual Result<BlockInfo> Probe(const BlockAddress& address) = 0;
  virtual Result<std::shared_ptr<BlockReader>> Open(const BlockAddress& address) = 0;
  // Open for a copy the daemon makes for itself (the RAM tier's promotion): the same checks and
  // the same verifying reader, but not a use of the block: the eviction policy sees neither the
  // open nor, for a block that left, the miss, so a copy never reorders what gets evicted; nor
  // does the reader hold the block: it may be evicted meanwhile, and the copy reads on from
  // what it opened (the RAM tier drops the copy of a block that left).
  virtual Result<std::shared_ptr<BlockReader>> OpenForCopy(const BlockAddress& address) = 0;
  virtual LookupResult Lookup(const CacheIdentity& identity) = 0;
};

// Upkeep and operations (admin requests; docs/operations.md and docs/eviction.md): what
// takes blocks out, fences, drains, fault domains, limits, counters and observers.
class BlockAdmin {
 public:
  virtual ~BlockAdmin() = default;

  // Explicit client invalidation (unlink of a committed block). A block with open handles is
  // quarantined rather than freed.
  virtual StatusCode Invalidate(const BlockAddress& address) = 0;

  // Evicts one block now; kBusy if it is pinned. Open handles: quarantined.
  virtual StatusCode Evict(const BlockAddress& address) = 0;
  virtual StatusCode SetPinned(const BlockAddress& address, bool pinned) = 0;
  // Bumps and persists the epoch; every in-flight reservation is fenced: its next write or
  // commit fails with kFenced, and its credits are released now. Returns the new epoch, or
  // kTooLarge past kLastEpoch (changing nothing).
  virtual Result<uint64_t> Fence() = 0;
  virtual std::vector<QuarantineInfo> ListQuarantine() = 0;
  virtual Result<QuarantineInfo> StatQuarantine(uint64_t region_id) = 0;
  // A drained attestation: the holder of `region_id` no longer uses it. kBusy while the
  // daemon itself still has a handle open on it.
  virtual StatusCode ReclaimDrained(uint64_t region_id) = 0;
  // Frees every block quarantined before the fence that made `epoch` current. kFenced if
  // `epoch` is not the current epoch (fence first, then name the new epoch). Returns the count.
  virtual Result<uint64_t> ReclaimFenced(uint64_t epoch) = 0;
  // Rolling upgrade: kStart refuses new admits (kDraining) while reads and in-flight fills go
  // on; kFinish fences; kRollback (before kFinish) resumes admits.
  virtual StatusCode Drain(DrainAction action) = 0;
  // Removes one fault domain: its blocks become misses and nothing new is placed there.
  // Refuses (kInvalidArgument) to remove the last one; kNotFound for an unknown path.
  virtual StatusCode IsolateDomain(const std::string& path) {
    (void)path;
    return StatusCode::kNotSupported;
  }
  virtual std::vector<DomainInfo> Domains() { return {}; }

  virtual uint64_t Epoch() = 0;
  virtual StoreStats Stats() = 0;

  // A live reload (SIGHUP): admission checks use `limits` from now on; fills already admitted
  // go on, and their commits are judged by the new limits.
  virtual void SetLimits(ResourceLimits limits) = 0;

  // --- Observers (null: none).
  virtual void SetRemovalObserver(RemovalObserver observer) = 0;
  // REQUIRES: called before the store is shared between threads (start-up wiring).
  virtual void SetCommitObserver(CommitObserver observer) = 0;
  // REQUIRES: called before the store is shared between threads (start-up wiring).
  virtual void SetInvalidationObserver(InvalidationObserver observer) = 0;
  virtual void SetAutomaticFenceObserver(AutomaticFenceObserver observer) = 0;
  virtual void SetBackingReadErrorObserver(BackingReadErrorObserver observer) = 0;
};

class BlockStore : public virtual BlockFills,
                   public virtual BlockReads,
                   public virtual BlockAdmin {};

}  // namespace gpucache
