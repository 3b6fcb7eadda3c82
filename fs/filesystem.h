// Filesystem: the namespace of docs/architecture.md ("The namespace") on top of the store.
//
// Each method is one FUSE operation's logic with the FUSE plumbing taken out: it takes the
// caller and decoded arguments and returns a Result; fs/fuse_ops.cc decodes requests, calls
// one method, and replies (mapping StatusCode to errno once, in fs/errno_map.cc).
//
// Access: the daemon checks every request itself: tenant-scoped nodes need a member of the
// tenant or an admin. With fuse.permissions = "daemon" (no default_permissions) tenant
// directory entries are never cached by the kernel, so every path walk into a tenant is
// re-checked with the walking caller's credentials (adr/0001). With "kernel" the mount uses
// default_permissions and each tenant directory carries its tenant's owner uid and group with
// mode 0770 (0700 without a group), so the kernel checks every walk from cached attributes
// and tenant entries are cached like the rest (adr/0009).
//
// Thread safety: all methods may run concurrently; the store and inode table lock themselves.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <set>
#include <string>
#include <vector>

#include "common/commit_frame.h"
#include "fs/access.h"
#include "fs/byte_budget.h"
#include "fs/caller_slots.h"
#include "fs/config.h"
#include "fs/control.h"
#include "fs/inode_table.h"
#include "fs/log.h"
#include "fs/metrics.h"
#include "fs/passthrough_table.h"
#include "fs/ram_serving.h"
#include "store/block_store.h"
#include "store/mutex.h"

namespace gpucache {

struct EntryReply {
  uint64_t ino = 0;  // 0: a negative entry (the kernel may cache the miss)
  struct stat attr {};
  double entry_timeout = 0;
  double attr_timeout = 0;
};

struct AttrReply {
  struct stat attr {};
  double timeout = 0;
};

// A frame being received through `.gpucache/commit` (adr/0022): one block, committed by the
// write that brings its last byte.
struct FrameState {
  uint64_t received = 0;      // bytes of the frame taken so far; 0 until its header was read
  commit_frame::Header header;  // its identity is dropped once the fill holds it
  ReservationId fill = 0;     // the reservation the payload goes to (0: none)
  bool writing = false;       // fill counted as an open writer in the store
  BlockAddress address;
  bool done = false;                    // committed: only a new frame (offset 0) may follow
  uint32_t thread = 0;  // the thread that wrote its header: the only one that may continue it
  StatusCode failed = StatusCode::kOk;  // the frame's answer once it failed
};

// An open file: a verified reader of a committed block, a reservation being written, a
// snapshot of a virtual file, a control-channel exchange, or a channel for commit frames.
struct Handle {
  enum class Kind : uint8_t { kBlock, kPart, kText, kControl, kCommit };
  Kind kind = Kind::kText;
  std::shared_ptr<BlockReader> reader;  // kBlock: held for passthrough opens too (adr/0020)
  uint64_t ino = 0;                     // kBlock: the inode opened
  int backing_id = -1;                  // kBlock: RamServing::Open's answer (-1: not counted)
  ReservationId reservation = 0;        // kPart
  BlockAddress address;                 // kPart
  bool append = false;                  // kPart: opened with O_APPEND (set at open)
  // Lock order: mu -> the store's locks (a write or flush holds it while it takes or gives
  // back the writer role); see store/indexed_store.h.
  Mutex mu;
  bool writing GUARDED_BY(mu) = false;  // kPart: counted as an open writer in the store
  std::string text GUARDED_BY(mu);      // kText: contents; kControl: last reply
  size_t reply_cursor GUARDED_BY(mu) = 0;  // kControl: how much of the reply was read
  // kControl: a request answered when its reply is read (ControlPlane::AnswersOnRead), and
  // who wrote it; empty once answered.
  std::string deferred_request GUARDED_BY(mu);
  Principal deferred_caller GUARDED_BY(mu);
  bool deferred_running GUARDED_BY(mu) = false;  // kControl: a read is answering it now
  // kControl: the deferred request holds a place of its (non-admin) writer among those waiting
  // for their reads, in this pool (Filesystem::waiting_slots_ or stranger_waiting_slots_).
  CallerSlots* waiting_slot GUARDED_BY(mu) = nullptr;
  std::set<std::string> waiting_tenants GUARDED_BY(mu);  // what the slot was charged to
  uint64_t requests_written GUARDED_BY(mu) = 0;  // kControl: a reply is kept only for the latest
  FrameState frame GUARDED_BY(mu);  // kCommit
  // kCommit, kControl: who opened it. Only that uid and gid may write through it, and with the
  // opener's supplementary groups: a descriptor handed to a more privileged process (a root
  // helper, a setgid one writing into a caller's fd) acts for nobody.
  // kText: whose budget `text` is charged to (Filesystem::snapshots_).
  uint32_t opener_uid = 0;
  uint32_t opener_gid = 0;
  std::function<std::vector<uint32_t>()> opener_groups;  // read at the open; null: none
  uint64_t charged = 0;  // kText: bytes charged for `text`, given back at the release
  ByteBudget* charged_to = nullptr;  // kText: the budget they were charged to
};

struct OpenReply {
  std::unique_ptr<Handle> handle;
  bool keep_cache = false;  // immutable contents: the kernel may keep its pages
  bool direct_io = false;   // generated contents: bypass the page cache
  bool noflush = false;     // nothing to do on close(): spare the FLUSH round trip
  int backing_id = 0;       // > 0: the kernel reads this open from a RAM copy (passthrough)
  // Writes through this open may run side by side (FOPEN_PARALLEL_DIRECT_WRITES): the commit
  // channel, whose frames on different opens are independent.
  bool parallel_direct_writes = false;
};

struct DirEntry {
  std::string name;
  mode_t type;  // S_IFDIR or S_IFREG
};

// A directory's listing, taken at its opendir and held by its handle until its release, and
// what it is charged to its opener (Filesystem::OpenListing).
struct Listing {
  std::vector<DirEntry> entries;
  uint32_t uid = 0;
  uint64_t charged = 0;
  ByteBudget* charged_to = nullptr;  // null: nothing charged (an admin's)
};

class Filesystem {
 public:
  Filesystem(const Config& config, BlockStore& store);
  // The mount must use default_permissions: access is expressed in mode bits (adr/0009).
  bool KernelPermissions() const { return config_.KernelPermissions(); }

  Result<EntryReply> Lookup(const Principal& c, uint64_t parent, std::string_view name);
  void Forget(uint64_t ino, uint64_t nlookup);
  // `h`: the handle the kernel passed, if any. An open block keeps its attributes after it
  // left the namespace, as an unlinked file does.
  Result<AttrReply> GetAttr(const Principal& c, uint64_t ino, Handle* h = nullptr);
  Result<AttrReply> SetAttr(const Principal& c, uint64_t ino, const struct stat& attr, int to_set);
  StatusCode Access(const Principal& c, uint64_t ino, int mask);
  Result<EntryReply> MkDir(const Principal& c, uint64_t parent, std::string_view name);
  StatusCode RmDir(const Principal& c, uint64_t parent, std::string_view name);
  StatusCode Unlink(const Principal& c, uint64_t parent, std::string_view name);
  StatusCode Rename(const Principal& c, uint64_t parent, std::string_view name, uint64_t new_parent,
                    std::string_view new_name, unsigned flags);
  // mknod, symlink and link: never allowed; the errno says where (RefuseChangeIn).
  StatusCode RefuseNewEntry(const Principal& c, uint64_t parent, std::string_view name);

  Result<std::pair<EntryReply, OpenReply>> Create(const Principal& c, uint64_t parent,
                                                  std::string_view name);
  // `backing`: the kernel's backing files, for an open the RAM tier can serve by passthrough
  // (null: none; every open is served by the daemon).
  Result<OpenReply> Open(const Principal& c, uint64_t ino, int flags, BackingFiles* backing = nullptr);
  Result<size_t> Read(Handle& h, uint64_t offset, std::span<uint8_t> out);
  Result<size_t> Write(const Principal& c, Handle& h, uint64_t offset, std::span<const uint8_t> data);
  // fallocate(2) on a `.part` handle, mode 0: declares the payload's size, so the store decides
  // whether it fits (evicting first if it must) before any of it is written. Other modes and
  // other handles: kNotSupported.
  StatusCode Allocate(Handle& h, int mode, uint64_t offset, uint64_t length);
  void Flush(Handle& h);
  // `backing`: as for Open (the last passthrough open of an inode closes its backing id).
  void Release(Handle& h, BackingFiles* backing = nullptr);

  Result<std::vector<DirEntry>> ReadDir(const Principal& c, uint64_t ino);
  // ReadDir for an opendir, charged to the caller's budget of generated copies held by open
  // handles (EAGAIN past it; snapshots_); CloseListing gives it back.
  Result<Listing> OpenListing(const Principal& c, uint64_t ino);
  void CloseListing(Listing& l);

  // Extended attributes: only `user.gpucache.*`; anything else is kNotSupported.
  Result<std::string> GetXattr(const Principal& c, uint64_t ino, std::string_view name);
  Result<std::vector<std::string>> ListXattr(const Principal& c, uint64_t ino);
  // `flags`: setxattr's XATTR_CREATE (EEXIST if the attribute has a value) and XATTR_REPLACE
  // (ENODATA if it has none).
  StatusCode SetXattr(const Principal& c, uint64_t ino, std::string_view name,
                      std::span<const uint8_t> value, int flags = 0);
  StatusCode RemoveXattr(const Principal& c, uint64_t ino, std::string_view name);

  InodeTable& inodes() { return inodes_; }
  Metrics& metrics() { return metrics_; }
  // Every tenant's metrics (the HTTP endpoint); the file shows only the caller's tenants.
  std::string RenderAllMetrics();
  BlockStore& store() { return store_; }
  // A block committed behind the kernel's back (a cold-tier refill): the kernel may hold a
  // negative dentry for it. The session installs the handler that invalidates it.
  // `now`: the kernel has heard of it when this returns. The notification takes the namespace
  // directory's lock, which a LOOKUP or CREATE there holds while it waits for one of the
  // daemon's threads: so at most kMaxNoticesNow are sent at once this way, the rest queued to
  // the invalidator's thread (as with `now` false), and callers hold no lock a FUSE request may
  // wait for. Calls run side by side.
  void BlockAppeared(const BlockAddress& a, bool now = true);
  void SetAppearedHandler(std::function<void(const BlockAddress&, bool now)> handler);
  // The RAM tier (adr/0020), set at start-up before the mount serves; null: off.
  void UseRam(std::unique_ptr<RamServing> ram);
  RamServing* ram() { return ram_.get(); }
  // A committed block left the namespace (evicted, invalidated, corrupt, lost): its RAM copy
  // goes, and its name no longer leads to its inode (InodeTable::Unmap), which is returned.
  std::optional<uint64_t> BlockLeft(const BlockAddress& a);
  // Control-channel extensions are registered here at start-up (fs/control.h).
  ControlPlane& control() { return control_; }

  // Live reload (fs/reload.h, docs/configuration.md "Reloading"): tenants, admins, limits and
  // quotas from `fresh`, without unmounting or fencing. CheckReload says why `fresh` cannot be
  // taken (empty: it can); Reload applies it and returns what it could not apply live (keys
  // that need a restart), one line each.
  std::string CheckReload(const Config& fresh) const;
  std::vector<std::string> Reload(const Config& fresh);

  // Control requests answered on read (ControlPlane::AnswersOnRead) that one non-admin uid, and
  // all of them together, may keep written and not yet read; past them a write is EAGAIN.
  static constexpr int kMaxWaitingPerCaller = 16;
  static constexpr int kMaxWaitingInAll = 256;
  static constexpr int kMaxWaitingPerTenant = 64;  // however many uids it has (review, 2026-12-07)
  static constexpr int kMaxWaitingPerStranger = 2;  // a uid in no tenant
  static constexpr int kMaxWaitingOfStrangers = 16;

 private:
  // The node behind `ino`, after checking that `c` may use its tenant (if it has one).
  Result<Node> Resolve(const Principal& c, uint64_t ino);
  Result<AttrReply> AttrOf(uint64_t ino, const Node& n);
  Result<AttrReply> NodeAttr(uint64_t ino, const Node& n);
  // A committed block's attributes from what the store said of it (StatAttributes, Probe).
  AttrReply BlockAttr(uint64_t ino, const Node& n, const BlockInfo& b);
  // kOk if block inode `ino` (0: none yet, a lookup) names the stored block `b` its name holds
  // now, and binds it to it if it named none yet; kStale if it names another one
  // (InodeTable::Bind): what the name says is then not what the inode holds.
  StatusCode SameBlock(uint64_t ino, const IndexedBlock& b);
  EntryReply Entry(const Node& n, const AttrReply& a, double entry_timeout, uint64_t region = 0);
  // How long the kernel may cache an entry (or a miss) inside a tenant: 0 with daemon checks.
  double EntryTtlInTenant() const;
  double NegativeTtlInTenant() const;
  Result<EntryReply> LookupInNamespace(const Node& dir, std::string_view name);
  // The fill of `address` that `c` may act on (the store checks, BlockFills::FillFor): kBusy if
  // it is someone else's; if there is none, or a fence ended it, what a vanished `.part` answers.
  Result<ReservationId> OwnFill(const Principal& c, const BlockAddress& address);
  // A store call's answer about a fill found by OwnFill: a fill that ended since (a fence that
  // dropped an idle reservation) answers as a vanished `.part`, not as a plain ENOENT.
  StatusCode FillAnswer(StatusCode s, const BlockAddress& address);
  Result<std::string> BlockXattr(uint64_t ino, const Node& n, std::string_view key);
  Result<std::string> PartXattr(const Node& n, std::string_view key);

  const Config config_;  // as started; tenants, admins and limits: see access_ and effective_
  // The configuration in effect: config_ with the last reload's tenants, admins and limits.
  std::atomic<std::shared_ptr<const Config>> effective_;
  AccessPolicy access_;
  BlockStore& store_;
  InodeTable inodes_;
  ControlPlane control_;
  // The refusal of a change the namespace does not allow in directory `dir`: EACCES in the
  // root and .gpucache (root-owned, 0755/0555: what the kernel answers a non-owner there with
  // fuse.permissions = "kernel"), EPERM inside a tenant. Both permission modes answer alike.
  static StatusCode RefuseChangeIn(const Node& dir);
  // kNameTooLong for a component longer than NAME_MAX, which no node here can have.
  static StatusCode CheckName(std::string_view name);
  // The mode and owner of a tenant's block or `.part`, and of a block read through a handle.
  struct stat FileAttr(uint64_t ino, NodeKind kind, const std::string& tenant, Owner owner,
                       uint64_t size) const;
  // Answers a block open from the RAM tier if it can (sets r.backing_id), else counts it there.
  void ServeFromRam(uint64_t ino, Handle& h, OpenReply& r, BackingFiles* backing);
  // What a write through `h` hears once its reservation is gone.
  StatusCode GoneFill(const Handle& h);
  StatusCode AnswerDeferred(Handle& h);
  // The commit channel (fs/filesystem_commit.cc, adr/0022): a write of frame bytes at `offset`.
  Result<size_t> WriteFrame(const Principal& c, Handle& h, uint64_t offset, std::span<const uint8_t> data);
  // Remembers who opens a commit or control file (Handle::opener_uid).
  void RecordOpener(const Principal& c, Handle& h) const;
  // `writer` acting with the opener's credentials, or nullopt when it is not the opener (another
  // uid or gid): a write to a commit or control file is authorized as its opener.
  static std::optional<Principal> AsOpener(const Principal& writer, const Handle& h);
  StatusCode TakeFrameBytes(const Principal& c, FrameState& f, std::span<const uint8_t> data);
  StatusCode OpenFrameFill(const Principal& c, FrameState& f);
  StatusCode TakeFramePayload(FrameState& f, std::span<const uint8_t> data);
  // ENOENT when the frame's tenant is gone, EACCES when its writer may no longer use it.
  StatusCode StillMayCommit(const Principal& c, const FrameState& f) const;
  StatusCode CommitFrame(FrameState& f);
  StatusCode FailFrame(FrameState& f, StatusCode s);
  // libfuse runs at most 10 FUSE threads: 4 waiting for a directory's lock in BlockAppeared
  // leave 6 to answer the request that holds it.
  static constexpr int kMaxNoticesNow = 4;
  // Gives back the fill of an unfinished frame (a new frame, a failure, the last close).
  void AbandonFrame(FrameState& f);
  // Control requests answered on read that one non-admin uid may have running at once, and
  // all non-admin uids together: of libfuse's 10 threads, 4 may wait in BlockAppeared
  // (kMaxNoticesNow) and 4 here, which leaves 2 for every other request of every tenant.
  static constexpr int kMaxDeferredPerCaller = 2;
  static constexpr int kMaxDeferredInAll = 4;
  static constexpr int kMaxDeferredPerTenant = 3;  // however many uids it has: one uid leaves room
  CallerSlots deferred_slots_{kMaxDeferredPerCaller, kMaxDeferredInAll, kMaxDeferredPerTenant};
  // What the listings and `.gpucache` texts held by open handles may take, per uid and in all
  // (docs/operations.md, "Listings and generated files"): the tenants' members, and uids of no
  // tenant in a pool of their own, so that a few of them (anyone on the host may open the
  // metrics) cannot take the members' room (review, 2026-12-07). Admins are not bounded.
  static constexpr uint64_t kSnapshotBytesPerCaller = 128ull << 20;
  static constexpr uint64_t kSnapshotBytesInAll = 512ull << 20;
  static constexpr uint64_t kSnapshotBytesPerStranger = 16ull << 20;
  static constexpr uint64_t kSnapshotBytesOfStrangers = 64ull << 20;
  ByteBudget snapshots_{kSnapshotBytesPerCaller, kSnapshotBytesInAll};
  ByteBudget stranger_snapshots_{kSnapshotBytesPerStranger, kSnapshotBytesOfStrangers};
  // The budget a caller's copies are charged to; null for an admin.
  ByteBudget* SnapshotBudgetOf(const Principal& c);
  // Charges a text an open holds to its opener: false when over budget.
  bool ChargeText(const Principal& c, Handle& h) REQUIRES(h.mu);
  // Requests answered on read that are kept, written and not yet read, for one non-admin uid
  // and for all together (each up to kMaxControlRequest: 1 MiB of one uid, 16 MiB in all).
  // Uids of no tenant have a pool of their own, so that a few of them cannot take every place
  // from the tenants' members (they have no request that needs to wait).
  CallerSlots waiting_slots_{kMaxWaitingPerCaller, kMaxWaitingInAll, kMaxWaitingPerTenant};
  CallerSlots stranger_waiting_slots_{kMaxWaitingPerStranger, kMaxWaitingOfStrangers};
  // Forgets the request an open keeps for its read, and gives back its place.
  void DropWaiting(Handle& h) REQUIRES(h.mu);
  // ESTALE for a `.part` whose reservation a recent fence took, else ENOENT (adr/0006).
  StatusCode PartGone(const BlockAddress& address);
  // A commit refused with EINVAL is logged with its reason, at most once a second per tenant.
  void LogInvalidCommit(const BlockAddress& address, ReservationId id);
  Mutex invalid_log_mu_;
  std::map<std::string, std::unique_ptr<LogLimiter>> invalid_log_ GUARDED_BY(invalid_log_mu_);
  // Shared by the calls (a notification may wait for a directory's lock: one must not hold up
  // the others), exclusive to replace the handler.
  SharedMutex appeared_mu_;
  std::function<void(const BlockAddress&, bool)> appeared_ GUARDED_BY(appeared_mu_);
  // Notices being sent to the kernel at once by BlockAppeared(now = true).
  std::atomic<int> notices_now_{0};
  Metrics metrics_;
  std::unique_ptr<RamServing> ram_;  // set once before serving
  const uint64_t mount_time_ns_;  // times shown for directories and virtual files
};

std::vector<std::string> TenantNames(const Config& config);

}  // namespace gpucache
