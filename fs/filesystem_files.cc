// Filesystem: create/open/read/write/flush/release and directory listings.
#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "common/control_protocol.h"
#include "fs/filesystem.h"
#include "store/entry_name.h"

namespace gpucache {
namespace {

bool WantsWrite(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_APPEND));
}

// Backing files for callers that have none (tests, undo paths): nothing is ever registered.
class NoBackingFiles final : public BackingFiles {
 public:
  int Open(int) override { return 0; }
  void Close(int) override {}
};

BackingFiles& OrNone(BackingFiles* backing) {
  static NoBackingFiles none;
  return backing ? *backing : none;
}

}  // namespace

Result<std::pair<EntryReply, OpenReply>> Filesystem::Create(const Principal& c, uint64_t parent,
                                                            std::string_view name) {
  Result<Node> dir = Resolve(c, parent);
  if (!dir.ok()) return dir.status();
  if (StatusCode s = CheckName(name); s != StatusCode::kOk) return s;
  if (dir->kind != NodeKind::kNamespace) return RefuseChangeIn(dir.value());
  // Only reservations are created: <block>.part, exclusively.
  EntryName entry = ParseEntryName(name);
  if (!entry.part) return StatusCode::kInvalidArgument;
  std::string block(entry.block);
  if (!IsValidBlockName(block)) return StatusCode::kInvalidArgument;
  BlockAddress address{dir->tenant, dir->ns, block};
  Result<ReservationId> id = store_.Reserve(address, Owner{c.uid, c.gid});
  if (!id.ok()) return id.status();
  if (StatusCode s = store_.OpenWriter(id.value()); s != StatusCode::kOk) return s;
  Node child{NodeKind::kPart, dir->tenant, dir->ns, block};
  Result<AttrReply> a = AttrOf(0, child);
  if (!a.ok()) {
    store_.CloseWriter(id.value());
    return a.status();
  }
  OpenReply open;
  // Writes bypass the page cache: the kernel must not keep the writer's pages and serve them
  // as the committed block's without the daemon having verified them.
  open.direct_io = true;
  open.handle = std::make_unique<Handle>();
  open.handle->kind = Handle::Kind::kPart;
  open.handle->reservation = id.value();
  open.handle->address = address;
  {
    MutexLock lock(open.handle->mu);  // not shared yet: uncontended, for the analysis
    open.handle->writing = true;
  }
  return std::make_pair(Entry(child, a.value(), 0), std::move(open));
}

Result<OpenReply> Filesystem::Open(const Principal& c, uint64_t ino, int flags, BackingFiles* backing) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  OpenReply r;
  r.handle = std::make_unique<Handle>();
  Handle& h = *r.handle;
  switch (n->kind) {
    case NodeKind::kBlock: {
      if (WantsWrite(flags)) {
        // A name the kernel still caches for a block that just left (an eviction's
        // invalidation is queued) is a miss, not a committed block.
        return store_.StatAttributes({n->tenant, n->ns, n->block}).ok() ? StatusCode::kImmutable
                                                                         : StatusCode::kNotFound;
      }
      auto reader = store_.Open({n->tenant, n->ns, n->block});
      if (!reader.ok()) return reader.status();
      // A name may come back as another block while an inode of the one that left is still
      // held (the kernel's cached entry, /proc/PID/fd): that inode opens nothing else, or its
      // page cache and attributes would mix two blocks (review, 2026-12-07). ESTALE makes
      // the kernel look the path up again and open the new block's inode.
      if (StatusCode s = SameBlock(ino, reader.value()->info()); s != StatusCode::kOk) return s;
      h.kind = Handle::Kind::kBlock;
      h.reader = std::move(reader.value());
      metrics_.RecordBlockOpen(n->tenant);
      r.keep_cache = true;  // an inode's pages are of its one stored block
      r.noflush = true;     // a reader's close has nothing to flush
      ServeFromRam(ino, h, r, backing);
      return r;
    }
    case NodeKind::kPart: {
      // docs/user-guide.md, "Opening a .part": only its writer (or an admin) may reopen it,
      // and only to write; O_TRUNC empties it, O_APPEND writes at its end.
      if (!WantsWrite(flags)) return StatusCode::kBusy;  // not COMMITTED: not readable
      BlockAddress address{n->tenant, n->ns, n->block};
      Result<ReservationId> id = OwnFill(c, address);
      if (!id.ok()) return id.status();
      if (StatusCode s = store_.OpenWriter(id.value()); s != StatusCode::kOk) return FillAnswer(s, address);
      // The mount uses atomic_o_trunc: the kernel leaves O_TRUNC to us, and a reopen that kept
      // the old bytes would publish them under the new ones (issue 13, defect 1).
      if (flags & O_TRUNC) {
        if (StatusCode s = store_.Truncate(id.value(), 0); s != StatusCode::kOk) {
          store_.CloseWriter(id.value());
          return s;
        }
      }
      h.kind = Handle::Kind::kPart;
      h.reservation = id.value();
      h.address = address;
      h.append = (flags & O_APPEND) != 0;
      {
        MutexLock lock(h.mu);  // not shared yet: uncontended, for the analysis
        h.writing = true;
      }
      r.direct_io = true;  // as in Create
      return r;
    }
    case NodeKind::kConfigFile:
      if (WantsWrite(flags) || !access_.IsAdmin(c)) return StatusCode::kAccessDenied;
      h.kind = Handle::Kind::kText;
      {
        MutexLock lock(h.mu);
        h.text = EffectiveConfigText(*effective_.load());  // holds no secret: keys never live in it
        if (!ChargeText(c, h)) return StatusCode::kExhausted;
      }
      r.direct_io = true;
      return r;
    case NodeKind::kStatsFile:
    case NodeKind::kEpochFile:
    case NodeKind::kQuarantineFile:
    case NodeKind::kMetricsFile:
      if (WantsWrite(flags)) return StatusCode::kAccessDenied;
      h.kind = Handle::Kind::kText;
      {
        std::string text;
        if (n->kind == NodeKind::kStatsFile) text = control_.StatsText(c);
        else if (n->kind == NodeKind::kEpochFile) text = control_.EpochText();
        else if (n->kind == NodeKind::kQuarantineFile) text = control_.QuarantineText(c);
        else text = metrics_.Render(store_, {[&](const std::string& t) { return access_.MayAdminister(c, t); },
                                             access_.IsAdmin(c)});
        MutexLock lock(h.mu);
        h.text = std::move(text);
        if (!ChargeText(c, h)) return StatusCode::kExhausted;
      }
      r.direct_io = true;
      return r;
    case NodeKind::kCtlFile:
      h.kind = Handle::Kind::kControl;
      RecordOpener(c, h);
      r.direct_io = true;
      return r;
    case NodeKind::kCommitFile:
      // Frames are written, never read back: each write's answer is its return (adr/0022).
      if ((flags & O_ACCMODE) == O_RDONLY) return StatusCode::kAccessDenied;
      h.kind = Handle::Kind::kCommit;
      RecordOpener(c, h);  // a descriptor handed to another caller cannot commit as it
      r.direct_io = true;  // every write reaches the daemon, in the writer's context
      r.noflush = true;    // the last close's RELEASE gives back an unfinished frame's fill
      r.parallel_direct_writes = true;
      return r;
    default: return StatusCode::kBusy;  // directories are opened with opendir
  }
}

// The handle keeps its store reader whichever way it is served: the block counts as open, so an
// eviction or invalidation quarantines it, and a passthrough reader keeps reading the verified
// copy it opened, as a daemon-served reader keeps reading the quarantined file (adr/0020).
void Filesystem::ServeFromRam(uint64_t ino, Handle& h, OpenReply& r, BackingFiles* backing) {
  if (!ram_) return;
  h.ino = ino;
  h.backing_id = ram_->Open(ino, h.reader->info(), OrNone(backing));
  r.backing_id = std::max(h.backing_id, 0);
  // The kernel takes no page-cache flag beside passthrough (FOPEN_PASSTHROUGH_MASK: direct_io,
  // parallel direct writes and noflush only); keep_cache would fail the open with EIO.
  if (r.backing_id > 0) r.keep_cache = false;
}

Result<size_t> Filesystem::Read(Handle& h, uint64_t offset, std::span<uint8_t> out) {
  switch (h.kind) {
    case Handle::Kind::kBlock: {
      const BlockInfo& info = h.reader->info();
      Metrics::NoteTenant(info.address.tenant);
      Result<size_t> n = h.reader->Read(offset, out);
      if (n.ok() && n.value() > 0) metrics_.RecordBlockRead(info.address.tenant, n.value());
      return n;  // an I/O error is counted and logged by the store's reader, for every reader
    }
    case Handle::Kind::kPart: return StatusCode::kBusy;
    case Handle::Kind::kCommit: return size_t{0};  // opened read-write: nothing to read
    case Handle::Kind::kText: {
      MutexLock lock(h.mu);
      if (offset >= h.text.size()) return size_t{0};
      size_t n = std::min<size_t>(out.size(), h.text.size() - offset);
      std::memcpy(out.data(), h.text.data() + offset, n);
      return n;
    }
    case Handle::Kind::kControl: {
      if (StatusCode s = AnswerDeferred(h); s != StatusCode::kOk) return s;
      // A reply is a stream: reads continue where the last one stopped, whatever the file
      // offset (after write() it points past the request, and pread callers pass 0).
      MutexLock lock(h.mu);
      size_t n = std::min<size_t>(out.size(), h.text.size() - h.reply_cursor);
      std::memcpy(out.data(), h.text.data() + h.reply_cursor, n);
      h.reply_cursor += n;
      return n;
    }
  }
  return StatusCode::kBusy;
}

void Filesystem::RecordOpener(const Principal& c, Handle& h) const {
  h.opener_uid = c.uid;
  h.opener_gid = c.gid;
  // Read now, while the open's request lives; only when groups can matter (a /proc read).
  if (access_.UsesGroups()) h.opener_groups = c.Detached().supplementary_groups;
}

std::optional<Principal> Filesystem::AsOpener(const Principal& writer, const Handle& h) {
  if (writer.uid != h.opener_uid || writer.gid != h.opener_gid) return std::nullopt;
  Principal p = writer;
  p.supplementary_groups = h.opener_groups;
  return p;
}

Result<size_t> Filesystem::Write(const Principal& c, Handle& h, uint64_t offset,
                                 std::span<const uint8_t> data) {
  if (h.kind == Handle::Kind::kControl) {
    // As for the commit channel: a request acts for the caller that opened the file, or for
    // nobody (review, 2026-12-07: a setgid helper writing into a caller's descriptor acted with
    // its own group).
    std::optional<Principal> opener = AsOpener(c, h);
    if (!opener) return StatusCode::kAccessDenied;
    const Principal& caller = *opener;
    if (data.size() > kMaxControlRequest) return StatusCode::kTooLarge;
    std::string_view request(reinterpret_cast<const char*>(data.data()), data.size());
    if (ControlPlane::AnswersOnRead(request)) {  // it may wait: not while holding the write lock
      const Principal who = access_.Establish(caller);
      CallerSlots* pool = who.admin ? nullptr : who.tenants.empty() ? &stranger_waiting_slots_ : &waiting_slots_;
      MutexLock lock(h.mu);
      DropWaiting(h);
      // Kept until its read: a bounded number per uid, or opens that are never read would hold
      // the daemon's memory (64 KiB each).
      if (pool) {
        if (!pool->TryTake(caller.uid, who.tenants)) return StatusCode::kExhausted;
        h.waiting_slot = pool;
        h.waiting_tenants = who.tenants;
      }
      ++h.requests_written;
      h.deferred_request = std::string(request);
      h.deferred_caller = caller.Detached();  // its groups read while the request is alive
      h.text.clear();
      h.reply_cursor = 0;
      return data.size();
    }
    std::string reply = control_.Handle(caller, request);
    MutexLock lock(h.mu);
    ++h.requests_written;
    DropWaiting(h);
    h.text = std::move(reply);
    h.reply_cursor = 0;
    return data.size();
  }
  if (h.kind == Handle::Kind::kCommit) return WriteFrame(c, h, offset, data);
  if (h.kind != Handle::Kind::kPart) return StatusCode::kImmutable;
  Metrics::NoteTenant(h.address.tenant);
  {
    MutexLock lock(h.mu);
    if (!h.writing) {  // written again after a flush: a writer once more
      if (StatusCode s = store_.OpenWriter(h.reservation); s != StatusCode::kOk) {
        return s == StatusCode::kNotFound ? GoneFill(h) : s;
      }
      h.writing = true;
    }
  }
  // O_APPEND: the kernel's idea of the end (its cached size) may be stale; the store's is not.
  Result<size_t> n = h.append ? store_.Append(h.reservation, data)
                              : store_.Write(h.reservation, offset, data);
  if (n.ok()) metrics_.RecordWrite(h.address.tenant, n.value());
  if (!n.ok() && n.status() == StatusCode::kNotFound) return GoneFill(h);
  return n;
}

// Runs a request written to `h` that waits for its answer (ControlPlane::AnswersOnRead), on
// the thread of the read() that wants the reply: reads of one file are not serialized the way
// its writes are, so the wait holds up no other control request.
//
// Each such request holds one of the daemon's FUSE threads while it runs: a caller that is not
// an admin runs at most kMaxDeferredPerCaller of them at once, and all such callers together
// kMaxDeferredInAll (EAGAIN past that, with a hint to use "async"), so no tenant, nor several
// together, can take every thread and stall the others. For the same
// reason no thread waits for a request another read of the same file is running: that read
// answers kExhausted (EAGAIN) at once (a flush returns), and the reply is there to read once the
// request ends. The handle's lock is not held while the request runs.
StatusCode Filesystem::AnswerDeferred(Handle& h) {
  std::string request;
  Principal caller;
  std::set<std::string> tenants;  // the caller's, charged for its slot
  uint64_t written = 0;
  bool limited = false;
  {
    MutexLock lock(h.mu);
    if (h.deferred_running) return StatusCode::kExhausted;
    if (h.deferred_request.empty()) return StatusCode::kOk;
    caller = h.deferred_caller;
    const Principal who = access_.Establish(caller);
    limited = !who.admin;
    tenants = who.tenants;
    if (limited && !deferred_slots_.TryTake(caller.uid, tenants)) {
      h.text = control_protocol::Error(
          EAGAIN, "too many control requests are running (at most " + std::to_string(kMaxDeferredPerCaller) +
                      " of one uid, " + std::to_string(kMaxDeferredPerTenant) + " of one tenant, " +
                      std::to_string(kMaxDeferredInAll) +
                      " of all members); wait for one, or send cold requests with \"async\": true");
      DropWaiting(h);
      h.reply_cursor = 0;
      return StatusCode::kOk;
    }
    request = std::move(h.deferred_request);
    DropWaiting(h);
    h.deferred_running = true;
    written = h.requests_written;
  }
  std::string reply = control_.Handle(caller, request);
  if (limited) deferred_slots_.Give(caller.uid, tenants);
  MutexLock lock(h.mu);
  h.deferred_running = false;
  if (h.requests_written == written) {  // not replaced by a request written meanwhile
    h.text = std::move(reply);
    h.reply_cursor = 0;
  }
  return StatusCode::kOk;
}

void Filesystem::DropWaiting(Handle& h) {
  h.deferred_request.clear();
  if (h.waiting_slot) h.waiting_slot->Give(h.opener_uid, h.waiting_tenants);  // its writer is its opener
  h.waiting_slot = nullptr;
  h.waiting_tenants.clear();
}

// A write handle whose reservation is gone: committed (the block is read-only), fenced (ESTALE
// while that is remembered: found by the model tester, where a forked child's close of a copy of
// the descriptor ended the writer role before the fence took the reservation), or abandoned.
StatusCode Filesystem::GoneFill(const Handle& h) {
  return store_.StatAttributes(h.address).ok() ? StatusCode::kImmutable : PartGone(h.address);
}

StatusCode Filesystem::Allocate(Handle& h, int mode, uint64_t offset, uint64_t length) {
  if (h.kind != Handle::Kind::kPart || mode != 0) return StatusCode::kNotSupported;
  Metrics::NoteTenant(h.address.tenant);
  if (offset + length < offset) return StatusCode::kTooLarge;
  Result<ReservationInfo> r = store_.StatReservation(h.reservation);
  if (!r.ok()) return GoneFill(h);
  if (offset + length <= r->size) return StatusCode::kOk;
  return store_.Truncate(h.reservation, offset + length);
}

// close() sends FLUSH synchronously but RELEASE asynchronously, so a writer that closes and
// renames at once may have its RENAME served before its RELEASE. Flush therefore ends the
// handle's writer role; a later write through the same handle (a dup'ed fd) takes it again.
void Filesystem::Flush(Handle& h) {
  // A request written and never read (write, then close) still runs, as it did when every
  // request ran inside write(): at close, which the kernel does not serialize per file.
  if (h.kind == Handle::Kind::kControl) (void)AnswerDeferred(h);  // running elsewhere: it ends there
  if (h.kind != Handle::Kind::kPart) return;
  MutexLock lock(h.mu);
  if (h.writing) store_.CloseWriter(h.reservation);
  h.writing = false;
}

ByteBudget* Filesystem::SnapshotBudgetOf(const Principal& c) {
  const Principal who = access_.Establish(c);
  return who.admin ? nullptr : who.tenants.empty() ? &stranger_snapshots_ : &snapshots_;
}

bool Filesystem::ChargeText(const Principal& c, Handle& h) {
  ByteBudget* budget = SnapshotBudgetOf(c);
  if (!budget) return true;
  if (!budget->TryTake(c.uid, h.text.size())) return false;
  h.opener_uid = c.uid;
  h.charged = h.text.size();
  h.charged_to = budget;
  return true;
}

void Filesystem::Release(Handle& h, BackingFiles* backing) {
  Flush(h);
  if (h.kind == Handle::Kind::kText) {
    MutexLock lock(h.mu);
    if (h.charged_to) h.charged_to->Give(h.opener_uid, h.charged);
    h.charged = 0;
    h.charged_to = nullptr;
  }
  if (h.kind == Handle::Kind::kCommit) {
    MutexLock lock(h.mu);
    AbandonFrame(h.frame);
  }
  if (h.kind == Handle::Kind::kControl) {
    MutexLock lock(h.mu);
    DropWaiting(h);
  }
  if (ram_ && h.kind == Handle::Kind::kBlock && h.backing_id >= 0) {
    ram_->Release(h.ino, h.backing_id, h.reader->info(), OrNone(backing));
    h.backing_id = -1;
  }
}

void Filesystem::UseRam(std::unique_ptr<RamServing> ram) {
  ram_ = std::move(ram);
  RamServing* serving = ram_.get();
  metrics_.SetRamSource([serving] { return serving->Metrics(); });
}

std::optional<uint64_t> Filesystem::BlockLeft(const BlockAddress& a) {
  // The notice may come late (a batch of evictions is told of each after its file went), after
  // the name was committed again and looked up: that block's inode and RAM copy stay (review,
  // 2026-12-07). A copy of the block that left never matches the new one's region anyway.
  Result<BlockInfo> now = store_.StatAttributes(a);
  const uint64_t current = now.ok() ? now->region_id : 0;
  if (ram_ && current == 0) ram_->Forget(a);
  // A block committed under the name later gets a new inode, and never this one's cached pages
  // (a reader that still holds this one open refills them with the bytes that left); this one
  // opens nothing else (InodeTable::Bind).
  return inodes_.Unmap(Node{NodeKind::kBlock, a.tenant, a.ns, a.block}, current);
}

void Filesystem::BlockAppeared(const BlockAddress& a, bool now) {
  const bool counted = now;
  if (now && notices_now_.fetch_add(1, std::memory_order_relaxed) >= kMaxNoticesNow) now = false;
  {
    ReaderLock lock(appeared_mu_);
    if (appeared_) appeared_(a, now);
  }
  if (counted) notices_now_.fetch_sub(1, std::memory_order_relaxed);
}

void Filesystem::SetAppearedHandler(std::function<void(const BlockAddress&, bool)> handler) {
  WriterLock lock(appeared_mu_);
  appeared_ = std::move(handler);
}

std::string Filesystem::RenderAllMetrics() {
  return metrics_.Render(store_, {[](const std::string&) { return true; }, true});
}

Result<Listing> Filesystem::OpenListing(const Principal& c, uint64_t ino) {
  Result<std::vector<DirEntry>> entries = ReadDir(c, ino);
  if (!entries.ok()) return entries.status();
  Listing l{std::move(entries.value()), c.uid, 0, nullptr};
  ByteBudget* budget = SnapshotBudgetOf(c);
  if (!budget) return l;
  uint64_t bytes = l.entries.capacity() * sizeof(DirEntry);
  for (const DirEntry& e : l.entries) bytes += e.name.capacity() > 15 ? e.name.capacity() + 1 : 0;
  if (!budget->TryTake(c.uid, bytes)) return StatusCode::kExhausted;
  l.charged = bytes;
  l.charged_to = budget;
  return l;
}

void Filesystem::CloseListing(Listing& l) {
  if (l.charged_to) l.charged_to->Give(l.uid, l.charged);
  l.charged = 0;
  l.charged_to = nullptr;
}

Result<std::vector<DirEntry>> Filesystem::ReadDir(const Principal& c, uint64_t ino) {
  Result<Node> n = Resolve(c, ino);
  if (!n.ok()) return n.status();
  std::vector<DirEntry> out = {{".", S_IFDIR}, {"..", S_IFDIR}};
  switch (n->kind) {
    case NodeKind::kRoot:
      out.push_back({".gpucache", S_IFDIR});
      for (const TenantConfig& t : access_.tenants()) {  // as of the last reload
        if (access_.MayUseTenant(c, t.name)) out.push_back({t.name, S_IFDIR});
      }
      return out;
    case NodeKind::kControlDir:
      for (const char* f : {"stats", "epoch", "quarantine", "metrics", "ctl", "config", "commit"}) {
        out.push_back({f, S_IFREG});
      }
      return out;
    case NodeKind::kTenant:
      for (std::string& ns : store_.ListNamespaces(n->tenant)) out.push_back({std::move(ns), S_IFDIR});
      return out;
    case NodeKind::kNamespace:
      for (std::string& e : store_.ListEntries(n->tenant, n->ns)) out.push_back({std::move(e), S_IFREG});
      return out;
    default: return StatusCode::kInvalidArgument;
  }
}

}  // namespace gpucache
