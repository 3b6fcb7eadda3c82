// The commit protocol of docs/user-guide.md at the Filesystem level: create -> setxattr
// identity -> write -> flush/release -> rename, the reopen flags of "Opening a .part", the
// refusals that keep the `.part` for its writer, single flight (docs/single-flight.md) and
// fencing (adr/0006). Each step calls what fs/fuse_ops.cc would call for the request.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>

#include <atomic>
#include <memory>
#include <string>

#include "tests/support/fs_harness.h"

namespace gpucache {
namespace {

using namespace test;

Bytes Text(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

TEST_CASE("Filesystem: the commit protocol publishes the written bytes under the block's name") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ns = h.Namespace(id);
  Reply part = h.CreatePart(id);
  REQUIRE(part.err == 0);
  REQUIRE(h.fs.SetXattr(kWriter, part.ino, "user.gpucache.identity", EncodePhysicalKey(id)) ==
          StatusCode::kOk);
  Bytes payload = Payload(3000);
  // Two writes, the second past the first: the payload is the bytes at their offsets.
  REQUIRE(h.fs.Write(kWriter, *part.handle, 0, std::span(payload).first(1000)).ok());
  REQUIRE(h.fs.Write(kWriter, *part.handle, 1000, std::span(payload).subspan(1000)).ok());
  h.Close(*part.handle);
  // Not readable before the commit, under either name.
  CHECK(ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::BlockName(id))).negative);
  CHECK(ReplyToOpen(h.fs.Open(kWriter, part.ino, O_RDONLY)).err == EBUSY);

  REQUIRE(ReplyErrno(h.Rename(id)) == 0);
  Result<Bytes> got = h.ReadBlock(id);
  REQUIRE(got.ok());
  CHECK(got.value() == payload);
  // The `.part` is gone: a miss the kernel must not cache (another fill may follow).
  Reply gone = ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::PartName(id)));
  CHECK(gone.err == ENOENT);
  Result<std::vector<DirEntry>> list = h.fs.ReadDir(kWriter, ns);
  REQUIRE(list.ok());
  std::vector<std::string> names;
  for (const DirEntry& e : list.value()) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{".", "..", FsHarness::BlockName(id)});
  // The inode the kernel knew as the `.part` now names the block.
  CHECK(ReplyToAttr(h.fs.GetAttr(kWriter, part.ino)).attr.st_size == 3000);
  Result<std::string> state = h.fs.GetXattr(kWriter, part.ino, "user.gpucache.state");
  REQUIRE(state.ok());
  CHECK(state.value() == "COMMITTED");
  Result<std::string> owner = h.fs.GetXattr(kWriter, part.ino, "user.gpucache.owner");
  REQUIRE(owner.ok());
  CHECK(owner.value() == "1000:1000");
  Result<std::string> identity = h.fs.GetXattr(kMember, part.ino, "user.gpucache.identity");
  REQUIRE(identity.ok());
  CHECK(Bytes(identity->begin(), identity->end()) == EncodePhysicalKey(id));
}

TEST_CASE(
    "Filesystem: a commit while a write handle is open is EBUSY, after its flush it succeeds") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  Reply part = h.CreatePart(id);
  REQUIRE(part.err == 0);
  REQUIRE(h.fs.SetXattr(kWriter, part.ino, "user.gpucache.identity", EncodePhysicalKey(id)) ==
          StatusCode::kOk);
  REQUIRE(h.fs.Write(kWriter, *part.handle, 0, Payload(100)).ok());
  CHECK(ReplyErrno(h.Rename(id)) == EBUSY);
  CHECK(h.PartSize(id) == 100);
  // close() sends FLUSH at once and RELEASE later: the rename that follows close() may be
  // served first, and must succeed.
  h.fs.Flush(*part.handle);
  CHECK(ReplyErrno(h.Rename(id)) == 0);
  h.fs.Release(*part.handle);
  // A later write through the same handle (a dup'ed descriptor) finds a committed block.
  CHECK(ReplyErrno(h.fs.Write(kWriter, *part.handle, 0, Payload(1)).status()) == EPERM);
  Result<Bytes> got = h.ReadBlock(id);
  REQUIRE(got.ok());
  CHECK(got.value() == Payload(100));
}

TEST_CASE("Filesystem: a wrong, malformed or missing identity is EINVAL and the .part stays") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  Bytes other = EncodePhysicalKey(OtherBlock(0x22));  // valid, but names another path
  uint64_t part = h.WritePart(id, Payload(64), kWriter, &other);
  CHECK(ReplyErrno(h.Rename(id)) == EINVAL);
  CHECK(h.PartSize(id) == 64);

  REQUIRE(h.fs.SetXattr(kWriter, part, "user.gpucache.identity", Text("GPCK garbage")) ==
          StatusCode::kOk);  // stored as given; checked at the commit
  CHECK(ReplyErrno(h.Rename(id)) == EINVAL);
  CHECK(h.PartSize(id) == 64);

  // The writer fixes it and commits the same bytes.
  REQUIRE(h.fs.SetXattr(kWriter, part, "user.gpucache.identity", EncodePhysicalKey(id)) ==
          StatusCode::kOk);
  CHECK(ReplyErrno(h.Rename(id)) == 0);
  Result<Bytes> got = h.ReadBlock(id);
  REQUIRE(got.ok());
  CHECK(got.value() == Payload(64));

  // No identity at all: refused too, and the writer may abandon the `.part` instead.
  CacheIdentity bare = OtherBlock(0x33);
  Reply p = h.CreatePart(bare);
  REQUIRE(p.err == 0);
  REQUIRE(h.fs.Write(kWriter, *p.handle, 0, Payload(8)).ok());
  h.Close(*p.handle);
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kWriter, p.ino, "user.gpucache.identity")) == ENODATA);
  CHECK(ReplyErrno(h.Rename(bare)) == EINVAL);
  CHECK(h.PartSize(bare) == 8);
  CHECK(ReplyErrno(h.fs.Unlink(kWriter, h.Namespace(bare), FsHarness::PartName(bare))) == 0);
  CHECK(h.PartSize(bare) == -1);
}

TEST_CASE("Filesystem: an empty payload is not committed and the .part stays") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.WritePart(id, Bytes{});
  CHECK(ReplyErrno(h.Rename(id)) != 0);  // step 4: at least one byte
  CHECK(h.PartSize(id) == 0);
  CHECK(h.ReadBlock(id).status() == StatusCode::kNotFound);
}

// Shell `>` and Python's open(p, "wb") reopen with O_TRUNC and expect an empty file.
TEST_CASE("Filesystem: a reopen of a .part with O_TRUNC empties it, in both permission modes") {
  for (const char* permissions : {"daemon", "kernel"}) {
    CAPTURE(permissions);
    FsHarness h(permissions);
    CacheIdentity id = SampleIdentity("acme");
    uint64_t part = h.WritePart(id, Bytes(10, 'A'));
    Reply reopen = ReplyToOpen(h.fs.Open(kWriter, part, O_WRONLY | O_TRUNC));
    REQUIRE(reopen.err == 0);
    CHECK(reopen.direct_io);
    CHECK(h.PartSize(id) == 0);
    REQUIRE(h.fs.Write(kWriter, *reopen.handle, 0, Text("BB")).ok());
    h.Close(*reopen.handle);
    REQUIRE(ReplyErrno(h.Rename(id)) == 0);
    Result<Bytes> got = h.ReadBlock(id);
    REQUIRE(got.ok());
    CHECK(got.value() == Text("BB"));  // not BBAAAAAAAA (issue 13, defect 1)
  }
}

TEST_CASE("Filesystem: O_APPEND writes land at the .part's end, O_RDWR writes but cannot read") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t part = h.WritePart(id, Bytes(4, 'A'));
  Reply append = ReplyToOpen(h.fs.Open(kWriter, part, O_WRONLY | O_APPEND));
  REQUIRE(append.err == 0);
  // The kernel passes its idea of the offset; with O_APPEND the store's end wins.
  REQUIRE(h.fs.Write(kWriter, *append.handle, 0, Text("BB")).ok());
  REQUIRE(h.fs.Write(kWriter, *append.handle, 0, Text("C")).ok());
  h.Close(*append.handle);
  Reply rdwr = ReplyToOpen(h.fs.Open(kWriter, part, O_RDWR));
  REQUIRE(rdwr.err == 0);
  uint8_t c;
  CHECK(ReplyErrno(h.fs.Read(*rdwr.handle, 0, std::span(&c, 1)).status()) == EBUSY);
  REQUIRE(h.fs.Write(kWriter, *rdwr.handle, 7, Text("D")).ok());
  h.Close(*rdwr.handle);
  REQUIRE(ReplyErrno(h.Rename(id)) == 0);
  Result<Bytes> got = h.ReadBlock(id);
  REQUIRE(got.ok());
  CHECK(got.value() == Text("AAAABBCD"));
}

TEST_CASE(
    "Filesystem: another member's write opens of a .part are EBUSY and change nothing, an admin's "
    "are not") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t part = h.WritePart(id, Bytes(10, 'A'));
  for (int flags : {O_WRONLY, O_RDWR, O_WRONLY | O_TRUNC, O_WRONLY | O_APPEND}) {
    CAPTURE(flags);
    CHECK(ReplyToOpen(h.fs.Open(kMember, part, flags)).err == EBUSY);
  }
  CHECK(h.PartSize(id) == 10);
  // "By its writer (or an admin)": root may write another's `.part`.
  Reply admin = ReplyToOpen(h.fs.Open(kRoot, part, O_WRONLY | O_APPEND));
  REQUIRE(admin.err == 0);
  REQUIRE(h.fs.Write(kRoot, *admin.handle, 0, Text("Z")).ok());
  h.Close(*admin.handle);
  CHECK(h.PartSize(id) == 11);
  // The member's refused opens took no writer role, so nothing holds the commit back.
  CHECK(ReplyErrno(h.Rename(id)) == 0);
}

TEST_CASE("Filesystem: the writer may truncate and fallocate its own .part") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t part = h.WritePart(id, Bytes(10, 'A'));
  struct stat st {};
  st.st_size = 4;
  Reply r = ReplyToAttr(h.fs.SetAttr(kWriter, part, st, FUSE_SET_ATTR_SIZE));
  REQUIRE(r.err == 0);
  CHECK(r.attr.st_size == 4);
  // Times are accepted (touch works on a `.part`) and change nothing else.
  int touch = FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
  CHECK(ReplyToAttr(h.fs.SetAttr(kWriter, part, st, touch)).err == 0);
  CHECK(h.PartSize(id) == 4);
  Reply open = ReplyToOpen(h.fs.Open(kWriter, part, O_WRONLY));
  REQUIRE(open.err == 0);
  CHECK(ReplyErrno(h.fs.Allocate(*open.handle, 0, 0, 100)) == 0);  // declares the size
  CHECK(h.PartSize(id) == 100);
  CHECK(ReplyErrno(h.fs.Allocate(*open.handle, 1 /* FALLOC_FL_KEEP_SIZE */, 0, 200)) == ENOTSUP);
  h.Close(*open.handle);
  CHECK(h.PartSize(id) == 100);
}

TEST_CASE(
    "Filesystem: single flight: the second create is EEXIST and the joiner reads the outcome") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ns = h.Namespace(id);
  const std::string fill = "user.gpucache.fill." + FsHarness::BlockName(id);
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kMember, ns, fill)) == ENODATA);  // no fill remembered
  Reply leader = h.CreatePart(id);
  REQUIRE(leader.err == 0);
  CHECK(h.CreatePart(id, kMember).err == EEXIST);
  CHECK(h.fs.GetXattr(kMember, ns, fill).value() == "pending");
  CHECK(h.fs.GetXattr(kMember, leader.ino, "user.gpucache.fill").value() == "pending");
  REQUIRE(h.fs.SetXattr(kWriter, leader.ino, "user.gpucache.identity", EncodePhysicalKey(id)) ==
          StatusCode::kOk);
  REQUIRE(h.fs.Write(kWriter, *leader.handle, 0, Payload(10)).ok());
  h.Close(*leader.handle);
  REQUIRE(ReplyErrno(h.Rename(id)) == 0);
  CHECK(h.fs.GetXattr(kMember, ns, fill).value() == "finished");
  CHECK(h.CreatePart(id, kMember).err == EEXIST);  // committed: do not write it twice

  // An abandoned fill reads "failed", and a new fill may start.
  CacheIdentity other = OtherBlock(0x44);
  const std::string other_fill = "user.gpucache.fill." + FsHarness::BlockName(other);
  h.WritePart(other, Payload(10));
  REQUIRE(ReplyErrno(h.fs.Unlink(kWriter, ns, FsHarness::PartName(other))) == 0);
  CHECK(h.fs.GetXattr(kMember, ns, other_fill).value() == "failed");
  Reply again = h.CreatePart(other, kMember);
  CHECK(again.err == 0);
  if (again.handle) h.Close(*again.handle);
}

TEST_CASE("Filesystem: a fence makes the fill's write, identity, rename and name answer ESTALE") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ns = h.Namespace(id);
  Reply part = h.CreatePart(id);
  REQUIRE(part.err == 0);
  REQUIRE(h.fs.Write(kWriter, *part.handle, 0, Payload(10)).ok());
  REQUIRE(h.store.Fence().ok());
  CHECK(ReplyErrno(h.fs.Write(kWriter, *part.handle, 10, Payload(10)).status()) == ESTALE);
  CHECK(ReplyErrno(h.fs.SetXattr(kWriter, part.ino, "user.gpucache.identity",
                                 EncodePhysicalKey(id))) == ESTALE);
  h.Close(*part.handle);
  // The kernel resolves the rename's source first: that lookup must say why (adr/0006).
  CHECK(ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::PartName(id))).err == ESTALE);
  CHECK(ReplyErrno(h.Rename(id)) == ESTALE);
  const std::string fill = "user.gpucache.fill." + FsHarness::BlockName(id);
  CHECK(h.fs.GetXattr(kMember, ns, fill).value() == "fenced");
  CHECK(h.ReadBlock(id).status() == StatusCode::kNotFound);  // fenced is not success
  // Other names are not affected.
  Reply other = ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::PartName(OtherBlock(0x55))));
  CHECK(other.err == ENOENT);
}

// A store that lets a fence in right after the filesystem asked about a fill: the windows
// between the filesystem's questions about one fill and its action on it, which 32 threads of
// tests/load hit about once a minute (EBUSY at the identity's setxattr, ENOENT at the rename).
class FenceAfterQuestion final : public IndexedStore {
 public:
  explicit FenceAfterQuestion(StoreOptions options)
      : IndexedStore(std::move(options), std::make_unique<MemoryMedium>()) {}
  std::optional<ReservationId> FindReservation(const BlockAddress& address) override {
    std::optional<ReservationId> id = IndexedStore::FindReservation(address);
    if (fence_after_find_.exchange(false)) REQUIRE(Fence().ok());
    return id;
  }
  // The question a change to a `.part` asks (found and checked under one lock): the window is
  // between its answer and the change.
  Result<ReservationId> FillFor(const BlockAddress& address, std::optional<uint32_t> uid) override {
    Result<ReservationId> id = IndexedStore::FillFor(address, uid);
    if (fence_after_find_.exchange(false)) REQUIRE(Fence().ok());
    return id;
  }
  void FenceAfterNextFind() { fence_after_find_ = true; }

 private:
  std::atomic<bool> fence_after_find_{false};
};

TEST_CASE("Filesystem: a fence between finding a fill and acting on it answers ESTALE") {
  BasicFsHarness<FenceAfterQuestion> h;
  CacheIdentity open_fill = SampleIdentity("acme"), closed_fill = OtherBlock(0x21);
  Reply part = h.CreatePart(open_fill);
  REQUIRE(part.err == 0);
  h.store.FenceAfterNextFind();
  CHECK(ReplyErrno(h.fs.SetXattr(kWriter, part.ino, "user.gpucache.identity",
                                 EncodePhysicalKey(open_fill))) == ESTALE);
  h.Close(*part.handle);

  h.WritePart(closed_fill, Payload(10));  // closed: the fence drops the idle reservation at once
  h.store.FenceAfterNextFind();
  CHECK(ReplyErrno(h.Rename(closed_fill)) == ESTALE);
  CHECK(h.ReadBlock(closed_fill).status() == StatusCode::kNotFound);

  CacheIdentity truncated = OtherBlock(0x22);
  uint64_t ino = h.WritePart(truncated, Payload(10));
  h.store.FenceAfterNextFind();
  struct stat size{};
  size.st_size = 4;
  CHECK(ReplyErrno(h.fs.SetAttr(kWriter, ino, size, FUSE_SET_ATTR_SIZE).status()) == ESTALE);

  // The kernel's lookup of the name (a rename's source) found it, then the fence came.
  CacheIdentity looked_up = OtherBlock(0x24);
  h.WritePart(looked_up, Payload(10));
  h.store.FenceAfterNextFind();
  CHECK(ReplyToEntry(h.fs.Lookup(kWriter, h.Namespace(looked_up), FsHarness::PartName(looked_up))).err ==
        ESTALE);

  // Found and checked (FillFor, one question since 58d9154), then fenced: the commit finds the
  // idle reservation gone.
  CacheIdentity late = OtherBlock(0x23);
  h.WritePart(late, Payload(10));
  h.store.FenceAfterNextFind();
  CHECK(ReplyErrno(h.Rename(late)) == ESTALE);
  CHECK(h.ReadBlock(late).status() == StatusCode::kNotFound);
}

TEST_CASE("Filesystem: a fenced .part's xattrs answer ESTALE, not that an attribute is missing") {
  // ENODATA would tell the writer its identity was never set; the fence is what happened.
  BasicFsHarness<FenceAfterQuestion> h;
  CacheIdentity closed_fill = SampleIdentity("acme"), open_fill = OtherBlock(0x25);
  uint64_t closed = h.WritePart(closed_fill, Payload(10));  // closed: dropped at the fence
  REQUIRE(h.store.Fence().ok());
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kWriter, closed, "user.gpucache.identity")) == ESTALE);
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kWriter, closed, "user.gpucache.state")) == ESTALE);
  CHECK(ReplyErrno(h.fs.ListXattr(kWriter, closed).status()) == ESTALE);

  // Found, then fenced before its questions were answered.
  Reply part = h.CreatePart(open_fill);
  REQUIRE(part.err == 0);
  REQUIRE(h.fs.SetXattr(kWriter, part.ino, "user.gpucache.identity", EncodePhysicalKey(open_fill)) ==
          StatusCode::kOk);
  CHECK(h.fs.GetXattr(kWriter, part.ino, "user.gpucache.state").value() == "RESERVED");
  h.store.FenceAfterNextFind();
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kWriter, part.ino, "user.gpucache.identity")) == ESTALE);
  h.Close(*part.handle);
}

TEST_CASE("Filesystem: a fill fenced after its close answers ESTALE at the rename") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.WritePart(id, Payload(10));  // closed: the fence drops the reservation at once
  REQUIRE(h.store.Fence().ok());
  CHECK(ReplyErrno(h.Rename(id)) == ESTALE);
  CHECK(h.PartSize(id) == -1);
}

// adr/0006 and the errno table: for one reservation lease after a fence, "a new fill of exactly
// that block also fails (ESTALE at create)". Through a mount the kernel's lookup of the `.part`
// name answered ESTALE first; a CREATE that reached Filesystem::Create (or a commit-channel
// frame, which has no lookup) started the new fill at once. The store's Reserve checks it now.
TEST_CASE("Filesystem: a create within one lease of a fence is ESTALE") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.WritePart(id, Payload(10));
  REQUIRE(h.store.Fence().ok());
  Reply again = h.CreatePart(id, kWriter);
  CHECK(again.err == ESTALE);
  if (again.handle) h.Close(*again.handle);
  CHECK(ReplyErrno(h.Rename(id)) == ESTALE);  // the fenced writer's rename still says why
}

TEST_CASE("Filesystem: a write after the .part was abandoned is ENOENT") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  Reply part = h.CreatePart(id);
  REQUIRE(part.err == 0);
  REQUIRE(h.fs.Write(kWriter, *part.handle, 0, Payload(10)).ok());
  REQUIRE(ReplyErrno(h.fs.Unlink(kWriter, h.Namespace(id), FsHarness::PartName(id))) == 0);
  CHECK(ReplyErrno(h.fs.Write(kWriter, *part.handle, 10, Payload(10)).status()) == ENOENT);
  h.Close(*part.handle);
  const std::string fill = "user.gpucache.fill." + FsHarness::BlockName(id);
  CHECK(h.fs.GetXattr(kWriter, h.Namespace(id), fill).value() == "failed");
}

TEST_CASE(
    "Filesystem: limits answer EFBIG and EAGAIN, draining EROFS, and refusals leave no .part") {
  SUBCASE("EFBIG: a block larger than max_block_bytes") {
    FsHarness h("daemon", "max_block_bytes = 16");
    CacheIdentity id = SampleIdentity("acme");
    Reply part = h.CreatePart(id);
    REQUIRE(part.err == 0);
    CHECK(ReplyErrno(h.fs.Write(kWriter, *part.handle, 0, Payload(17)).status()) == EFBIG);
    CHECK(ReplyErrno(h.fs.Allocate(*part.handle, 0, 0, 17)) == EFBIG);
    CHECK(ReplyErrno(h.fs.Write(kWriter, *part.handle, 0, Payload(16)).status()) == 0);
    h.Close(*part.handle);
  }
  SUBCASE("EAGAIN: fills in flight at their limit") {
    FsHarness h("daemon", "max_inflight_requests = 1");
    h.WritePart(SampleIdentity("acme"), Payload(10));
    CacheIdentity second = OtherBlock(0x66);
    CHECK(h.CreatePart(second).err == EAGAIN);
    CHECK(h.PartSize(second) == -1);
  }
  SUBCASE("EROFS: new fills while draining, the fill in flight still commits") {
    FsHarness h;
    CacheIdentity id = SampleIdentity("acme");
    h.WritePart(id, Payload(10));
    REQUIRE(h.store.Drain(DrainAction::kStart) == StatusCode::kOk);
    CacheIdentity second = OtherBlock(0x77);
    CHECK(h.CreatePart(second).err == EROFS);
    CHECK(h.PartSize(second) == -1);
    CHECK(ReplyErrno(h.Rename(id)) == 0);
  }
}

TEST_CASE("Filesystem: unlinking a block invalidates it, an open reader keeps reading") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(500));
  uint64_t ns = h.Namespace(id);
  uint64_t block = h.Ino(ns, FsHarness::BlockName(id));
  Reply open = ReplyToOpen(h.fs.Open(kMember, block, O_RDONLY));
  REQUIRE(open.err == 0);
  // Any member may say "this block is wrong", not only its committer.
  REQUIRE(ReplyErrno(h.fs.Unlink(kMember, ns, FsHarness::BlockName(id))) == 0);
  CHECK(ReplyToEntry(h.fs.Lookup(kMember, ns, FsHarness::BlockName(id))).negative);
  CHECK(ReplyToAttr(h.fs.GetAttr(kMember, block)).err == ENOENT);
  // The handle keeps its attributes, as an unlinked file does, and its bytes.
  Reply kept = ReplyToAttr(h.fs.GetAttr(kMember, block, open.handle.get()));
  CHECK(kept.err == 0);
  CHECK(kept.attr.st_size == 500);
  Bytes out(500);
  Result<size_t> n = h.fs.Read(*open.handle, 0, out);
  REQUIRE(n.ok());
  CHECK(out == Payload(500));
  h.fs.Release(*open.handle);
  CHECK(ReplyErrno(h.fs.Unlink(kMember, ns, FsHarness::BlockName(id))) == ENOENT);
}

}  // namespace
}  // namespace gpucache
