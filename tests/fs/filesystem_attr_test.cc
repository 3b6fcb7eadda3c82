// What the Filesystem tells the kernel besides errno: entry and attribute timeouts (adr/0001:
// tenant entries are never cached with daemon permission checks; adr/0009: they are with
// kernel checks), the mode bits and owners of each node in both fuse.permissions modes, the
// open flags of each kind of file, listings and extended attributes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/support/fs_harness.h"

namespace gpucache {
namespace {

using namespace test;

// S_IFMT and permission bits together: a directory with the wrong bits is not "a 0770 dir".
mode_t Mode(const Reply& r) {
  return r.attr.st_mode & (S_IFMT | 07777);
}

std::vector<std::string> Names(const Result<std::vector<DirEntry>>& list) {
  std::vector<std::string> out;
  if (list.ok()) {
    for (const DirEntry& e : list.value()) out.push_back(e.name);
  }
  return out;
}

TEST_CASE("Filesystem: daemon permissions: no entry in or below a tenant is cached, attributes below are") {
  FsHarness h("daemon");
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  // Every walk into a tenant must come back to the daemon with the walker's credentials.
  Reply tenant = ReplyToEntry(h.fs.Lookup(kWriter, kRootIno, "acme"));
  REQUIRE(tenant.err == 0);
  CHECK(tenant.entry_timeout == 0);
  CHECK(tenant.attr_timeout == 0);
  CHECK(ReplyToAttr(h.fs.GetAttr(kWriter, tenant.ino)).attr_timeout == 0);
  CHECK(ReplyToEntry(h.fs.Lookup(kWriter, kRootIno, ".gpucache")).entry_timeout == kEntryTimeout);
  // Nor below it: a process whose working directory is inside a namespace walks from there,
  // and a cached entry would answer it without the daemon (tests/mount/cached_entries_test.cc).
  Reply ns = ReplyToEntry(h.fs.Lookup(kWriter, tenant.ino, AddressOf(id).ns));
  CHECK(ns.entry_timeout == 0);
  CHECK(ns.attr_timeout == kEntryTimeout);
  Reply block = ReplyToEntry(h.fs.Lookup(kWriter, ns.ino, FsHarness::BlockName(id)));
  CHECK(block.entry_timeout == 0);
  CHECK(block.attr_timeout == kEntryTimeout);
}

TEST_CASE("Filesystem: kernel permissions: tenant entries are cached like the rest") {
  FsHarness h("kernel");
  Reply tenant = ReplyToEntry(h.fs.Lookup(kWriter, kRootIno, "acme"));
  REQUIRE(tenant.err == 0);
  CHECK(tenant.entry_timeout == kEntryTimeout);
  CHECK(tenant.attr_timeout == kEntryTimeout);
  CHECK(ReplyToAttr(h.fs.GetAttr(kWriter, tenant.ino)).attr_timeout == kEntryTimeout);
}

TEST_CASE("Filesystem: misses are negative entries, a .part is never cached, in both modes") {
  for (const char* permissions : {"daemon", "kernel"}) {
    CAPTURE(permissions);
    FsHarness h(permissions);
    CacheIdentity id = SampleIdentity("acme");
    uint64_t tenant = h.Tenant();
    // A namespace or block that is not there: a miss the kernel may keep (a commit refreshes
    // it) when the kernel checks permissions; with daemon checks every walk asks again.
    const double negative = std::string(permissions) == "kernel" ? kNegativeTimeout : 0;
    Reply no_ns = ReplyToEntry(h.fs.Lookup(kWriter, tenant, AddressOf(id).ns));
    CHECK(no_ns.negative);
    CHECK(no_ns.entry_timeout == negative);
    uint64_t ns = h.Namespace(id);
    Reply no_block = ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::BlockName(id)));
    CHECK(no_block.negative);
    CHECK(no_block.entry_timeout == negative);
    // A `.part` that is not there is an error, not a negative entry: its name must be asked
    // again each time (a new fill, or ESTALE after a fence, adr/0006).
    Reply no_part = ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::PartName(id)));
    CHECK(no_part.err == ENOENT);
    Reply created = h.CreatePart(id);
    REQUIRE(created.err == 0);
    CHECK(created.entry_timeout == 0);
    Reply part = ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::PartName(id)));
    REQUIRE(part.err == 0);
    CHECK(part.entry_timeout == 0);
    CHECK(part.attr_timeout < kEntryTimeout);  // its size changes with every write
    h.Close(*created.handle);
    // A name in the root that is no tenant: nothing to cache either way.
    CHECK(ReplyToEntry(h.fs.Lookup(kWriter, kRootIno, "nosuch")).err == ENOENT);
  }
}

TEST_CASE("Filesystem: the root and .gpucache are root's in both modes") {
  for (const char* permissions : {"daemon", "kernel"}) {
    CAPTURE(permissions);
    FsHarness h(permissions);
    Reply root = ReplyToAttr(h.fs.GetAttr(kWriter, kRootIno));
    CHECK(Mode(root) == (S_IFDIR | 0755));
    CHECK(root.attr.st_uid == 0);
    Reply ctl = ReplyToAttr(h.fs.GetAttr(kWriter, kControlDirIno));
    CHECK(Mode(ctl) == (S_IFDIR | 0555));
    CHECK(ctl.attr.st_uid == 0);
    CHECK(Mode(ReplyToAttr(h.fs.GetAttr(kWriter, kStatsIno))) == (S_IFREG | 0444));
    CHECK(Mode(ReplyToAttr(h.fs.GetAttr(kWriter, kConfigIno))) == (S_IFREG | 0400));  // admins only
  }
}

// The namespace, a block and a `.part` of acme, all made by uid 1001 (a member through the
// group, not the tenant's uid), so that "its creator" and "its tenant" differ.
struct MadeByMember {
  FsHarness h;
  CacheIdentity block_id = SampleIdentity("acme"), part_id = OtherBlock(0x11);
  Reply ns, block, part;
  explicit MadeByMember(const std::string& permissions) : h(permissions) {
    ns = ReplyToEntry(h.fs.MkDir(kMember, h.Tenant(), AddressOf(block_id).ns));
    REQUIRE(ns.err == 0);
    h.Commit(block_id, Payload(100), kMember);
    h.WritePart(part_id, Payload(7), kMember);
    block = ReplyToEntry(h.fs.Lookup(kWriter, ns.ino, FsHarness::BlockName(block_id)));
    part = ReplyToEntry(h.fs.Lookup(kWriter, ns.ino, FsHarness::PartName(part_id)));
    REQUIRE(block.err == 0);
    REQUIRE(part.err == 0);
  }
};

TEST_CASE(
    "Filesystem: daemon permissions: blocks are 0444 and .parts 0600 of their writer, namespaces "
    "their creator's") {
  MadeByMember m("daemon");
  CHECK(S_ISDIR(m.ns.attr.st_mode));
  CHECK(m.ns.attr.st_uid == 1001);
  CHECK(m.ns.attr.st_gid == 3000);
  CHECK(Mode(m.block) == (S_IFREG | 0444));
  CHECK(m.block.attr.st_uid == 1001);
  CHECK(m.block.attr.st_gid == 3000);
  CHECK(m.block.attr.st_size == 100);
  CHECK(Mode(m.part) == (S_IFREG | 0600));
  CHECK(m.part.attr.st_uid == 1001);
  CHECK(m.part.attr.st_gid == 3000);
  CHECK(m.part.attr.st_size == 7);
  Reply tenant = ReplyToAttr(m.h.fs.GetAttr(kWriter, m.h.Tenant()));
  CHECK(S_ISDIR(tenant.attr.st_mode));
}

// adr/0009: mode bits say who may ask; the tenant's uid and group own everything below it,
// whoever made it, and the committer is in user.gpucache.owner.
TEST_CASE(
    "Filesystem: kernel permissions: everything in a tenant is its uid's and group's, 0770 and "
    "0660") {
  MadeByMember m("kernel");
  Reply tenant = ReplyToAttr(m.h.fs.GetAttr(kWriter, m.h.Tenant()));
  CHECK(Mode(tenant) == (S_IFDIR | 0770));
  CHECK(tenant.attr.st_uid == 1000);
  CHECK(tenant.attr.st_gid == 3000);
  CHECK(Mode(m.ns) == (S_IFDIR | 0770));
  CHECK(m.ns.attr.st_uid == 1000);
  CHECK(m.ns.attr.st_gid == 3000);
  for (const Reply* file : {&m.block, &m.part}) {
    CHECK(Mode(*file) == (S_IFREG | 0660));
    CHECK(file->attr.st_uid == 1000);
    CHECK(file->attr.st_gid == 3000);
  }
  CHECK(m.block.attr.st_size == 100);
  CHECK(m.part.attr.st_size == 7);
  Result<std::string> owner = m.h.fs.GetXattr(kWriter, m.block.ino, "user.gpucache.owner");
  REQUIRE(owner.ok());
  CHECK(owner.value() == "1001:3000");
}

TEST_CASE("Filesystem: kernel permissions: a tenant without a group is 0700 and 0600") {
  FsHarness h("kernel");
  CacheIdentity id = SampleIdentity("globex");
  h.Commit(id, Payload(10), kOutsider);  // kOutsider is globex's member
  uint64_t tenant = h.Tenant("globex");
  Reply dir = ReplyToAttr(h.fs.GetAttr(kOutsider, tenant));
  CHECK(Mode(dir) == (S_IFDIR | 0700));
  CHECK(dir.attr.st_uid == 2000);
  CHECK(dir.attr.st_gid == 0);
  Reply ns = ReplyToEntry(h.fs.Lookup(kOutsider, tenant, AddressOf(id).ns));
  CHECK(Mode(ns) == (S_IFDIR | 0700));
  Reply block = ReplyToEntry(h.fs.Lookup(kOutsider, ns.ino, FsHarness::BlockName(id)));
  CHECK(Mode(block) == (S_IFREG | 0600));
  CHECK(block.attr.st_uid == 2000);
}

TEST_CASE(
    "Filesystem: open flags: blocks keep their pages, .parts and generated files bypass them") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  Reply block =
      ReplyToOpen(h.fs.Open(kMember, h.Ino(h.Namespace(id), FsHarness::BlockName(id)), O_RDONLY));
  REQUIRE(block.err == 0);
  CHECK(block.keep_cache);  // committed bytes never change under a name
  CHECK(block.noflush);     // a reader's close has nothing to flush
  CHECK_FALSE(block.direct_io);
  // The kernel must not keep a writer's pages and serve them as the committed block's.
  Reply created = h.CreatePart(OtherBlock(0x11));
  REQUIRE(created.err == 0);
  CHECK(created.direct_io);
  CHECK_FALSE(created.keep_cache);
  CHECK_FALSE(created.noflush);  // the flush ends the writer role before the rename
  Reply reopened = ReplyToOpen(h.fs.Open(kWriter, created.ino, O_WRONLY));
  REQUIRE(reopened.err == 0);
  CHECK(reopened.direct_io);
  CHECK_FALSE(reopened.keep_cache);
  h.Close(*reopened.handle);
  h.Close(*created.handle);
  for (uint64_t ino : {kStatsIno, kEpochIno, kQuarantineIno, kMetricsIno, kCtlIno}) {
    CAPTURE(ino);
    Reply r = ReplyToOpen(h.fs.Open(kRoot, ino, O_RDONLY));
    REQUIRE(r.err == 0);
    CHECK(r.direct_io);  // generated anew for each open
    CHECK_FALSE(r.keep_cache);
  }
}

TEST_CASE("Filesystem: the root lists only the caller's tenants, admins see all") {
  FsHarness h;
  CHECK(Names(h.fs.ReadDir(kRoot, kRootIno)) ==
        std::vector<std::string>{".", "..", ".gpucache", "acme", "globex"});
  CHECK(Names(h.fs.ReadDir(kMember, kRootIno)) ==
        std::vector<std::string>{".", "..", ".gpucache", "acme"});
  CHECK(Names(h.fs.ReadDir(kOutsider, kRootIno)) ==
        std::vector<std::string>{".", "..", ".gpucache", "globex"});
  CHECK(Names(h.fs.ReadDir(kStranger, kRootIno)) ==
        std::vector<std::string>{".", "..", ".gpucache"});
}

TEST_CASE("Filesystem: a namespace lists its blocks and .parts, a tenant its namespaces") {
  FsHarness h;
  CacheIdentity block = SampleIdentity("acme"), part = OtherBlock(0x11);
  h.Commit(block, Payload(10));
  h.WritePart(part, Payload(10));
  std::vector<std::string> ns = Names(h.fs.ReadDir(kMember, h.Namespace(block)));
  CHECK(std::count(ns.begin(), ns.end(), FsHarness::BlockName(block)) == 1);
  CHECK(std::count(ns.begin(), ns.end(), FsHarness::PartName(part)) == 1);
  CHECK(ns.size() == 4);
  CHECK(Names(h.fs.ReadDir(kMember, h.Tenant())) ==
        std::vector<std::string>{".", "..", AddressOf(block).ns});
}

TEST_CASE("Filesystem: xattrs: a block's index keys are answered from memory, only header keys read the medium") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  uint64_t block = h.Ino(h.Namespace(id), FsHarness::BlockName(id));
  const uint64_t before = h.store.TEST_HeldReads();
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.state").value() == "COMMITTED");
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.epoch").value() == "1");
  CHECK(!h.fs.GetXattr(kMember, block, "user.gpucache.region").value().empty());
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.pinned").value() == "0");
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.owner").value() ==
        std::to_string(kWriter.uid) + ":" + std::to_string(kWriter.gid));
  CHECK(h.store.TEST_HeldReads() == before);  // five keys, no read of the medium
  for (const char* key : {"identity", "identity_text", "checksum", "valid_length"}) {
    CHECK(h.fs.GetXattr(kMember, block, std::string("user.gpucache.") + key).ok());
  }
  CHECK(h.store.TEST_HeldReads() == before + 4);
}

TEST_CASE("Filesystem: xattrs: listing a block's names reads its header once") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  uint64_t block = h.Ino(h.Namespace(id), FsHarness::BlockName(id));
  const uint64_t before = h.store.TEST_HeldReads();
  Result<std::vector<std::string>> names = h.fs.ListXattr(kMember, block);
  REQUIRE(names.ok());
  CHECK(names->size() == 10);
  CHECK(h.store.TEST_HeldReads() == before + 1);  // not once per key that needs the header
  // A block that left since its lookup is missing (ENOENT), as its stat says; its names are
  // not missing attributes (ENODATA for a getxattr).
  REQUIRE(h.store.Invalidate(AddressOf(id)) == StatusCode::kOk);
  CHECK(h.fs.ListXattr(kMember, block).status() == StatusCode::kNotFound);
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kMember, block, "user.gpucache.checksum")) == ENOENT);
  CHECK(ReplyXattrErrno(h.fs.GetXattr(kMember, block, "user.gpucache.state")) == ENOENT);
}

// How an operator (and gpucache-replay --mount, which waits for the kernel's asynchronous
// RELEASE before its next commit) sees why a block is not evicted: it is open.
TEST_CASE("Filesystem: xattrs: open_handles counts the handles open on a block") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  uint64_t block = h.Ino(h.Namespace(id), FsHarness::BlockName(id));
  auto handles = [&] { return h.fs.GetXattr(kMember, block, "user.gpucache.open_handles").value(); };
  CHECK(handles() == "0");
  Reply first = ReplyToOpen(h.fs.Open(kMember, block, O_RDONLY));
  Reply second = ReplyToOpen(h.fs.Open(kMember, block, O_RDONLY));
  REQUIRE(first.err == 0);
  REQUIRE(second.err == 0);
  CHECK(handles() == "2");
  h.fs.Release(*first.handle);
  first.handle.reset();  // as fuse_ops' RELEASE does: the reader closes with its handle
  CHECK(handles() == "1");
  h.fs.Release(*second.handle);
  second.handle.reset();
  CHECK(handles() == "0");
}

TEST_CASE("Filesystem: xattrs: a block lists what it is, a .part what it has so far") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  uint64_t block = h.Ino(h.Namespace(id), FsHarness::BlockName(id));
  Result<std::vector<std::string>> names = h.fs.ListXattr(kMember, block);
  REQUIRE(names.ok());
  CHECK(names.value() == std::vector<std::string>{
                             "user.gpucache.identity", "user.gpucache.identity_text",
                             "user.gpucache.state", "user.gpucache.checksum", "user.gpucache.epoch",
                             "user.gpucache.region", "user.gpucache.valid_length",
                             "user.gpucache.pinned", "user.gpucache.owner",
                             "user.gpucache.open_handles"});
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.valid_length").value() ==
        std::to_string(id.valid_length));
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.checksum").value().starts_with("xxh3-128:"));
  // Any member may pin, not only the committer.
  CHECK(h.fs.GetXattr(kMember, block, "user.gpucache.pinned").value() == "0");
  REQUIRE(h.fs.SetXattr(kMember, block, "user.gpucache.pinned", AsBytes("1")) == StatusCode::kOk);
  CHECK(h.fs.GetXattr(kWriter, block, "user.gpucache.pinned").value() == "1");

  Reply part = h.CreatePart(OtherBlock(0x11));
  REQUIRE(part.err == 0);
  auto part_names = [&] { return h.fs.ListXattr(kWriter, part.ino).value(); };
  CHECK(part_names() == std::vector<std::string>{"user.gpucache.state", "user.gpucache.epoch",
                                                 "user.gpucache.region", "user.gpucache.fill"});
  REQUIRE(h.fs.SetXattr(kWriter, part.ino, "user.gpucache.identity",
                        EncodePhysicalKey(OtherBlock(0x11))) == StatusCode::kOk);
  CHECK(part_names().front() == "user.gpucache.identity");
  CHECK(h.fs.GetXattr(kWriter, part.ino, "user.gpucache.state").value() == "RESERVED");
  h.Close(*part.handle);
}

TEST_CASE(
    "Filesystem: access(W_OK) of a block is refused with daemon permissions, of a .part not") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  uint64_t ns = h.Namespace(id);
  uint64_t block = h.Ino(ns, FsHarness::BlockName(id));
  CHECK(ReplyErrno(h.fs.Access(kMember, block, R_OK)) == 0);
  CHECK(ReplyErrno(h.fs.Access(kMember, block, W_OK)) == EACCES);
  CHECK(ReplyErrno(h.fs.Access(kMember, kStatsIno, W_OK)) == EACCES);
  uint64_t part = h.WritePart(OtherBlock(0x11), Payload(10));
  CHECK(ReplyErrno(h.fs.Access(kWriter, part, W_OK)) == 0);
  CHECK(ReplyErrno(h.fs.Access(kOutsider, block, R_OK)) == EACCES);  // and chdir into it
}

}  // namespace
}  // namespace gpucache
