#include "fs/fuse_ops.h"

#include <errno.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "fs/errno_map.h"
#include "fs/filesystem.h"
#include "fs/log.h"
#include "store/mutex.h"

namespace gpucache {
namespace {

Filesystem& Fs(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

Principal PrincipalOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Principal c{ctx->uid, ctx->gid, nullptr};
  c.thread = static_cast<uint32_t>(ctx->pid);
  c.supplementary_groups = [req] {
    std::vector<gid_t> groups(64);
    int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n > static_cast<int>(groups.size())) {
      groups.resize(static_cast<size_t>(n));
      n = fuse_req_getgroups(req, n, groups.data());
    }
    groups.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return std::vector<uint32_t>(groups.begin(), groups.end());
  };
  return c;
}

Handle& HandleOf(fuse_file_info* fi) { return *reinterpret_cast<Handle*>(fi->fh); }

// Backing ids whose open the kernel did not take (its reply failed). libfuse closes a backing
// id through a request, and the failed reply freed that one: they are closed through the next
// request that reaches the backing files (an open or a release), or by the kernel at unmount.
class OrphanedBackingIds {
 public:
  void Add(int backing_id) {
    MutexLock lock(mu_);
    ids_.push_back(backing_id);
    any_.store(true, std::memory_order_release);
  }
  void CloseThrough(fuse_req_t req) {
    if (!any_.load(std::memory_order_acquire)) return;  // every open and release asks: no lock
    std::vector<int> ids;
    {
      MutexLock lock(mu_);
      ids.swap(ids_);
      any_.store(false, std::memory_order_release);
    }
    for (int id : ids) fuse_passthrough_close(req, id);
  }

 private:
  Mutex mu_;
  std::vector<int> ids_ GUARDED_BY(mu_);
  std::atomic<bool> any_{false};
};

OrphanedBackingIds& Orphans() {
  static OrphanedBackingIds orphans;
  return orphans;
}

// The backing files of an open whose reply failed: a close is left to the next request.
class AfterFailedReply final : public BackingFiles {
 public:
  int Open(int) override { return 0; }  // never asked: the open is being undone
  void Close(int backing_id) override { Orphans().Add(backing_id); }
};

// Tests only: how long an OPEN waits before its reply (tests/mount/abort_test.cc aborts the
// connection meanwhile); 0 unless GPUCACHE_TEST_HOLD_OPEN_MS is set.
void HoldOpenForTests() {
  static const int ms = [] {
    const char* v = ::getenv("GPUCACHE_TEST_HOLD_OPEN_MS");
    return v ? std::atoi(v) : 0;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// The kernel's backing files, reached through the request being served (fs/passthrough_table.h).
class RequestBackingFiles final : public BackingFiles {
 public:
  explicit RequestBackingFiles(fuse_req_t req) : req_(req) { Orphans().CloseThrough(req_); }
  int Open(int fd) override {
    int id = fuse_passthrough_open(req_, fd);
    static LogLimiter refused(std::chrono::seconds(60));
    if (id <= 0 && refused.Allow()) {
      spdlog::warn("passthrough: the kernel refused a RAM copy as a backing file; such opens are "
                   "served by the daemon ({} more since the last line; "
                   "gpucache_ram_backing_refusals_total)",
                   refused.Suppressed());
    }
    return id;
  }
  void Close(int backing_id) override { fuse_passthrough_close(req_, backing_id); }

 private:
  fuse_req_t req_;
};

fuse_entry_param ToEntry(const EntryReply& e) {
  fuse_entry_param p{};
  p.ino = e.ino;
  p.attr = e.attr;
  p.attr_timeout = e.attr_timeout;
  p.entry_timeout = e.entry_timeout;
  return p;
}

// A refused fill is the operator's business (a quota or a limit to raise): one line per tenant
// and reason per 10 s, with how many were left out. Tenants come from the configuration, so
// the keys are few; two that share a hash share a line's budget, nothing worse.
void LogRefusedFill(fuse_req_t req, StatusCode s) {
  static BurstLimiter fills(1, std::chrono::seconds(10));
  const std::string& tenant = Metrics::CurrentTenant();
  uint32_t key = static_cast<uint32_t>(std::hash<std::string>{}(tenant) * 31 + static_cast<uint32_t>(s));
  uint64_t suppressed = 0;
  if (!fills.Allow(key, &suppressed)) return;
  spdlog::warn("refused a fill of tenant '{}' (uid {}) with {} ({}); {} more such refusals of it "
               "since the last line (gpucache_refusals_total; limits in docs/configuration.md)",
               tenant, fuse_req_ctx(req)->uid, strerrorname_np(ToErrno(s)), ToString(s), suppressed);
}

// Every refusal is counted by reason. A miss (ENOENT: a name that is not there, which
// gpucache_misses_total counts) is an answer, not a refusal; nor is an attribute `ls -la` or a
// security module asks for and gpucache does not keep. A full fd table would otherwise look
// like a silent stream of EAGAIN: it is logged, once per burst.
void Refused(fuse_req_t req, StatusCode s) {
  // A miss, an attribute a node lacks and a stale inode (the kernel looks the name up again)
  // are answers, not refusals.
  if (s == StatusCode::kOk || s == StatusCode::kNotFound || s == StatusCode::kNoAttribute ||
      s == StatusCode::kStale) {
    return;
  }
  if (Metrics::RepeatedRefusal()) return;  // counted (and logged) when it was first answered
  Fs(req).metrics().RecordRefusal(s);
  if (s == StatusCode::kTenantQuota || s == StatusCode::kTooLarge || s == StatusCode::kNoSpace) {
    LogRefusedFill(req, s);
  }
  static LogLimiter no_handles(std::chrono::seconds(10));
  if (s == StatusCode::kNoHandles && no_handles.Allow()) {
    spdlog::error("out of file descriptors (EMFILE/ENFILE): requests answered EAGAIN "
                  "({} more since the last report); raise LimitNOFILE or the fd limit",
                  no_handles.Suppressed());
  }
}

void ReplyStatus(fuse_req_t req, StatusCode s) {
  Refused(req, s);
  fuse_reply_err(req, ToErrno(s));
}

void SetOpenFlags(fuse_file_info* fi, OpenReply& r) {
  fi->keep_cache = r.keep_cache;
  fi->direct_io = r.direct_io;
  fi->noflush = r.noflush;
  fi->parallel_direct_writes = r.parallel_direct_writes;
  fi->backing_id = r.backing_id;  // > 0: FOPEN_PASSTHROUGH, the kernel reads the RAM copy
  fi->fh = reinterpret_cast<uint64_t>(r.handle.release());
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kLookup);
  auto r = Fs(req).Lookup(PrincipalOf(req), parent, name);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_entry_param e = ToEntry(r.value());
  fuse_reply_entry(req, &e);
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Fs(req).Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req).Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kGetAttr);
  auto r = Fs(req).GetAttr(PrincipalOf(req), ino, fi ? &HandleOf(fi) : nullptr);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_reply_attr(req, &r->attr, r->timeout);
}

void OpSetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kSetAttr);
  auto r = Fs(req).SetAttr(PrincipalOf(req), ino, *attr, to_set);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_reply_attr(req, &r->attr, r->timeout);
}

void OpAccess(fuse_req_t req, fuse_ino_t ino, int mask) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kOther);
  ReplyStatus(req, Fs(req).Access(PrincipalOf(req), ino, mask));
}

void OpMkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kMkDir);
  auto r = Fs(req).MkDir(PrincipalOf(req), parent, name);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_entry_param e = ToEntry(r.value());
  fuse_reply_entry(req, &e);
}

void OpRmDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kOther);
  ReplyStatus(req, Fs(req).RmDir(PrincipalOf(req), parent, name));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kUnlink);
  ReplyStatus(req, Fs(req).Unlink(PrincipalOf(req), parent, name));
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
              const char* new_name, unsigned int flags) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kRename);
  ReplyStatus(req, Fs(req).Rename(PrincipalOf(req), parent, name, new_parent, new_name, flags));
}

void OpRefuse(fuse_req_t req, fuse_ino_t parent, const char* name) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kOther);
  ReplyStatus(req, Fs(req).RefuseNewEntry(PrincipalOf(req), parent, name));
}
void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t, dev_t) { OpRefuse(req, parent, name); }
void OpSymlink(fuse_req_t req, const char*, fuse_ino_t parent, const char* name) { OpRefuse(req, parent, name); }
void OpLink(fuse_req_t req, fuse_ino_t, fuse_ino_t parent, const char* name) { OpRefuse(req, parent, name); }

// A reply frees its request whether or not the kernel took it: after fuse_reply_create or
// fuse_reply_open, nothing may reach `req` (the undo below once did, and crashed the daemon when
// an open was in flight as the connection was aborted).
void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t, fuse_file_info* fi) {
  Filesystem& fs = Fs(req);
  OpTimer timer(fs.metrics(), FuseOp::kCreate);
  auto r = fs.Create(PrincipalOf(req), parent, name);
  if (!r.ok()) return ReplyStatus(req, r.status());
  fuse_entry_param e = ToEntry(r->first);
  SetOpenFlags(fi, r->second);
  if (fuse_reply_create(req, &e, fi) != 0) {
    // The kernel did not take the handle (the caller was interrupted): undo the open.
    std::unique_ptr<Handle> h(&HandleOf(fi));
    fs.Release(*h);
  }
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Filesystem& fs = Fs(req);
  OpTimer timer(fs.metrics(), FuseOp::kOpen);
  RequestBackingFiles backing(req);
  auto r = fs.Open(PrincipalOf(req), ino, fi->flags, &backing);
  if (!r.ok()) return ReplyStatus(req, r.status());
  SetOpenFlags(fi, r.value());
  HoldOpenForTests();
  if (fuse_reply_open(req, fi) != 0) {
    std::unique_ptr<Handle> h(&HandleOf(fi));
    AfterFailedReply orphaned;
    fs.Release(*h, &orphaned);
  }
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kRead);
  thread_local std::vector<uint8_t> buf;  // reused: no allocation per read
  buf.resize(size);
  auto n = Fs(req).Read(HandleOf(fi), static_cast<uint64_t>(off), buf);
  if (!n.ok()) return ReplyStatus(req, n.status());
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), n.value());
}

void OpWrite(fuse_req_t req, fuse_ino_t, const char* data, size_t size, off_t off,
             fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kWrite);
  auto n = Fs(req).Write(PrincipalOf(req), HandleOf(fi), static_cast<uint64_t>(off),
                         {reinterpret_cast<const uint8_t*>(data), size});
  if (!n.ok()) return ReplyStatus(req, n.status());
  fuse_reply_write(req, n.value());
}

void OpFlush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kFlush);
  Fs(req).Flush(HandleOf(fi));
  fuse_reply_err(req, 0);
}

void OpRelease(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kRelease);
  std::unique_ptr<Handle> h(&HandleOf(fi));
  RequestBackingFiles backing(req);
  Fs(req).Release(*h, &backing);
  fuse_reply_err(req, 0);
}

void OpFallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length,
                 fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kOther);
  ReplyStatus(req, Fs(req).Allocate(HandleOf(fi), mode, static_cast<uint64_t>(offset),
                                    static_cast<uint64_t>(length)));
}

void OpFsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info*) { fuse_reply_err(req, 0); }

// A directory handle holds the listing taken at opendir, so readdir pages through a snapshot.
struct DirHandle {
  Listing listing;
};

void CloseDir(Filesystem& fs, DirHandle* d) {
  fs.CloseListing(d->listing);
  delete d;
}

void OpOpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Filesystem& fs = Fs(req);  // a failed reply frees `req`
  OpTimer timer(fs.metrics(), FuseOp::kReadDir);
  auto r = fs.OpenListing(PrincipalOf(req), ino);
  if (!r.ok()) return ReplyStatus(req, r.status());
  auto* d = new DirHandle{std::move(r.value())};
  fi->fh = reinterpret_cast<uint64_t>(d);
  if (fuse_reply_open(req, fi) != 0) CloseDir(fs, d);
}

// How many entries from `first` fit in a reply of `size` bytes, and the bytes they take.
std::pair<size_t, size_t> DirPage(fuse_req_t req, const DirHandle& d, size_t first, size_t size) {
  size_t bytes = 0;
  size_t end = first;
  for (; end < d.listing.entries.size(); ++end) {
    // With no room given, fuse_add_direntry only returns the entry's size.
    size_t n = fuse_add_direntry(req, nullptr, 0, d.listing.entries[end].name.c_str(), nullptr, 0);
    if (n > size - bytes) break;
    bytes += n;
  }
  return {end, bytes};
}

// The kernel may ask for up to 1 MiB per READDIR; the buffer is sized by what the page holds,
// so a short listing neither allocates nor zeroes a megabyte per call.
void OpReadDir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kReadDir);
  const auto& d = *reinterpret_cast<DirHandle*>(fi->fh);
  size_t first = std::min(static_cast<size_t>(std::max<off_t>(off, 0)), d.listing.entries.size());
  auto [end, bytes] = DirPage(req, d, first, size);
  auto buf = std::make_unique_for_overwrite<char[]>(std::max<size_t>(bytes, 1));
  size_t used = 0;
  for (size_t i = first; i < end; ++i) {
    struct stat st {};
    st.st_ino = 0xffffffff;  // FUSE_UNKNOWN_INO: the kernel looks the entry up when it is used
    st.st_mode = d.listing.entries[i].type;
    used += fuse_add_direntry(req, buf.get() + used, bytes - used, d.listing.entries[i].name.c_str(), &st,
                              static_cast<off_t>(i + 1));
  }
  fuse_reply_buf(req, buf.get(), used);
}

void OpReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  CloseDir(Fs(req), reinterpret_cast<DirHandle*>(fi->fh));
  fuse_reply_err(req, 0);
}

void ReplyXattr(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, value.size());
  if (size < value.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, value.data(), value.size());
}

void OpGetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kGetXattr);
  auto r = Fs(req).GetXattr(PrincipalOf(req), ino, name);
  if (!r.ok()) {
    if (r.status() != StatusCode::kNotSupported) Refused(req, r.status());
    return (void)fuse_reply_err(req, ToErrno(r.status()));
  }
  ReplyXattr(req, r.value(), size);
}

void OpListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kGetXattr);
  auto r = Fs(req).ListXattr(PrincipalOf(req), ino);
  if (!r.ok()) return ReplyStatus(req, r.status());
  std::string list;
  for (const std::string& n : r.value()) list.append(n).push_back('\0');
  ReplyXattr(req, list, size);
}

void OpSetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kSetXattr);
  ReplyStatus(req, Fs(req).SetXattr(PrincipalOf(req), ino, name,
                                    {reinterpret_cast<const uint8_t*>(value), size}, flags));
}

void OpRemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  OpTimer timer(Fs(req).metrics(), FuseOp::kSetXattr);
  StatusCode s = Fs(req).RemoveXattr(PrincipalOf(req), ino, name);
  Refused(req, s);
  fuse_reply_err(req, ToErrno(s));
}

fuse_lowlevel_ops MakeOperations() {
  fuse_lowlevel_ops ops{};
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetAttr;
  ops.setattr = OpSetAttr;
  ops.access = OpAccess;
  ops.mkdir = OpMkDir;
  ops.rmdir = OpRmDir;
  ops.unlink = OpUnlink;
  ops.rename = OpRename;
  ops.mknod = OpMknod;
  ops.symlink = OpSymlink;
  ops.link = OpLink;
  ops.create = OpCreate;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.fallocate = OpFallocate;
  ops.opendir = OpOpenDir;
  ops.readdir = OpReadDir;
  ops.releasedir = OpReleaseDir;
  ops.getxattr = OpGetXattr;
  ops.listxattr = OpListXattr;
  ops.setxattr = OpSetXattr;
  ops.removexattr = OpRemoveXattr;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& FuseOperations() {
  static const fuse_lowlevel_ops ops = MakeOperations();
  return ops;
}

}  // namespace gpucache
