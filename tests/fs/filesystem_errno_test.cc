// The errno table of docs/user-guide.md ("Errors" and "Opening a .part"), request by request,
// at the Filesystem level: each row calls the operation fs/fuse_ops.cc would call for the
// request and takes the errno it would reply. tests/mount/errno_table_test.cc runs the same
// table through a real mount; this one needs no kernel, so it runs with every unit build, and
// it also reaches inodes the kernel would have cached for another caller (an outsider holding
// an inode number is refused at the node itself, not only at the path walk).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/support/fs_harness.h"

namespace gpucache {
namespace {

using namespace test;

// The state every row runs against: a committed block B (committed by uid 1000) and a `.part`
// P written by uid 1000 (identity set, 10 bytes, closed), both in namespace N of acme.
struct Table {
  FsHarness h;
  CacheIdentity b = SampleIdentity("acme"), p = OtherBlock(0x11);
  uint64_t tenant = 0, ns = 0, block = 0, part = 0;

  explicit Table(const std::string& permissions) : h(permissions) {
    h.Commit(b, Payload(5000));
    part = h.WritePart(p, Bytes(10, 'A'));
    tenant = h.Tenant();
    ns = h.Namespace(b);
    block = h.Ino(ns, FsHarness::BlockName(b));
  }
  Filesystem& fs() { return h.fs; }
  std::string B() const { return FsHarness::BlockName(b); }
  std::string P() const { return FsHarness::PartName(p); }
  std::string PBlock() const { return FsHarness::BlockName(p); }

  // open(2) of an inode; a handle that was granted is closed again at once.
  int Open(const Principal& c, uint64_t ino, int flags) {
    Reply r = ReplyToOpen(fs().Open(c, ino, flags));
    if (r.handle) h.Close(*r.handle);
    return r.err;
  }
  // open(O_CREAT) of a name that is not there yet.
  int Create(const Principal& c, uint64_t parent, const std::string& name) {
    Reply r = ReplyToCreate(fs().Create(c, parent, name));
    if (r.handle) h.Close(*r.handle);
    return r.err;
  }
  int SetAttr(const Principal& c, uint64_t ino, int to_set) {
    struct stat st {};
    st.st_mode = 0666;
    st.st_uid = st.st_gid = 1000;
    return ReplyToAttr(fs().SetAttr(c, ino, st, to_set)).err;
  }
  int SetX(const Principal& c, uint64_t ino, const std::string& name, const std::string& value) {
    return ReplyErrno(fs().SetXattr(c, ino, name, AsBytes(value)));
  }
  int GetX(const Principal& c, uint64_t ino, const std::string& name) {
    return ReplyXattrErrno(fs().GetXattr(c, ino, name));
  }
  int Lookup(const Principal& c, uint64_t parent, const std::string& name) {
    return ReplyToEntry(fs().Lookup(c, parent, name)).StatErrno();
  }
};

constexpr int kTruncate = FUSE_SET_ATTR_SIZE;
constexpr int kChmod = FUSE_SET_ATTR_MODE;
constexpr int kChown = FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID;
// utime(path, NULL), touch: "now", which needs write permission rather than ownership.
constexpr int kTouch =
    FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;

struct Row {
  std::string what;
  std::vector<Principal> who;
  std::function<int(Table&, const Principal&)> op;
  int want;
};

const std::vector<Principal> kMembers = {kRoot, kWriter, kMember};
const std::vector<Principal> kOutsiders = {kOutsider, kStranger};

// One row per line, as in the guide's table.
// clang-format off

// EACCES: the root and .gpucache belong to the daemon.
std::vector<Row> DaemonRows() {
  return {
      {"mkdir in the root", kMembers, [](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, kRootIno, "x")).err; }, EACCES},
      {"create in the root", kMembers, [](Table& t, const Principal& c) { return t.Create(c, kRootIno, "x"); }, EACCES},
      {"mkdir in .gpucache", kMembers, [](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, kControlDirIno, "x")).err; }, EACCES},
      {"create in .gpucache", kMembers, [](Table& t, const Principal& c) { return t.Create(c, kControlDirIno, "x"); }, EACCES},
      {"rename a tenant directory", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, kRootIno, "acme", kRootIno, "y", 0)); }, EACCES},
      {"rmdir a tenant directory", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RmDir(c, kRootIno, "acme")); }, EACCES},
      {"unlink .gpucache/stats", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Unlink(c, kControlDirIno, "stats")); }, EACCES},
      {"rename .gpucache/epoch", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, kControlDirIno, "epoch", kControlDirIno, "e", 0)); }, EACCES},
      {"symlink, mknod or link in the root", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RefuseNewEntry(c, kRootIno, "l")); }, EACCES},
      {"symlink in .gpucache", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RefuseNewEntry(c, kControlDirIno, "l")); }, EACCES},
      {"setxattr pinned on the root", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, kRootIno, "user.gpucache.pinned", "1"); }, EACCES},
      {"setxattr outside user.gpucache.* on the root", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, kRootIno, "user.other", "1"); }, EACCES},
      {"setxattr on .gpucache/stats", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, kStatsIno, "user.gpucache.pinned", "1"); }, EACCES},
      {"removexattr on the root", kMembers, [](Table& t, const Principal& c) { return ReplyXattrErrno(t.fs().RemoveXattr(c, kRootIno, "user.gpucache.pinned")); }, EACCES},
      {"write-open .gpucache/stats", kMembers, [](Table& t, const Principal& c) { return t.Open(c, kStatsIno, O_WRONLY); }, EACCES},
      {"append-open .gpucache/metrics", kMembers, [](Table& t, const Principal& c) { return t.Open(c, kMetricsIno, O_RDONLY | O_APPEND); }, EACCES},
      {"truncate .gpucache/epoch", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, kEpochIno, kTruncate); }, EACCES},
      {"touch .gpucache/epoch", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, kEpochIno, kTouch); }, EACCES},
      {"read .gpucache/config as a member who is no admin", {kWriter, kMember}, [](Table& t, const Principal& c) { return t.Open(c, kConfigIno, O_RDONLY); }, EACCES},
      {"read .gpucache/config as an admin", {kRoot}, [](Table& t, const Principal& c) { return t.Open(c, kConfigIno, O_RDONLY); }, 0},
      {"chmod the root", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, kRootIno, kChmod); }, EPERM},
  };
}

// EPERM: a committed block is immutable, but may be pinned; nothing but blocks lives in a tenant.
std::vector<Row> BlockRows() {
  return {
      {"open a block O_WRONLY", kMembers, [](Table& t, const Principal& c) { return t.Open(c, t.block, O_WRONLY); }, EPERM},
      {"open a block O_RDWR", kMembers, [](Table& t, const Principal& c) { return t.Open(c, t.block, O_RDWR); }, EPERM},
      {"open a block O_RDONLY|O_TRUNC", kMembers, [](Table& t, const Principal& c) { return t.Open(c, t.block, O_RDONLY | O_TRUNC); }, EPERM},
      {"open a block O_WRONLY|O_APPEND", kMembers, [](Table& t, const Principal& c) { return t.Open(c, t.block, O_WRONLY | O_APPEND); }, EPERM},
      {"truncate a block", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, t.block, kTruncate); }, EPERM},
      {"utime a block", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, t.block, kTouch); }, EPERM},
      {"chmod a block", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, t.block, kChmod); }, EPERM},
      {"chown a block", kMembers, [](Table& t, const Principal& c) { return t.SetAttr(c, t.block, kChown); }, EPERM},
      {"setxattr identity on a block", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, t.block, "user.gpucache.identity", "x"); }, EPERM},
      {"removexattr pinned on a block", kMembers, [](Table& t, const Principal& c) { return ReplyXattrErrno(t.fs().RemoveXattr(c, t.block, "user.gpucache.pinned")); }, EPERM},
      {"rename a block", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, t.ns, t.B(), t.ns, std::string(32, 'b'), 0)); }, EPERM},
      {"link a block, symlink or mknod in a namespace", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RefuseNewEntry(c, t.ns, "l")); }, EPERM},
      {"mkdir in a namespace", kMembers, [](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, t.ns, "x")).err; }, EPERM},
      {"create a file in a tenant directory", kMembers, [](Table& t, const Principal& c) { return t.Create(c, t.tenant, "x"); }, EPERM},
      {"symlink in a tenant directory", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RefuseNewEntry(c, t.tenant, "l")); }, EPERM},

      {"setxattr outside user.gpucache.* on a block", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, t.block, "user.other", "1"); }, ENOTSUP},
      {"getxattr outside user.gpucache.* on a block", kMembers, [](Table& t, const Principal& c) { return t.GetX(c, t.block, "user.other"); }, ENOTSUP},
      {"removexattr outside user.gpucache.* on a block", kMembers, [](Table& t, const Principal& c) { return ReplyXattrErrno(t.fs().RemoveXattr(c, t.block, "user.other")); }, ENOTSUP},
      {"getxattr of a user.gpucache.* name a block lacks", kMembers, [](Table& t, const Principal& c) { return t.GetX(c, t.block, "user.gpucache.nosuch"); }, ENODATA},
      {"getxattr of a user.gpucache.* name a .part lacks", kMembers, [](Table& t, const Principal& c) { return t.GetX(c, t.part, "user.gpucache.checksum"); }, ENODATA},
      {"pin a block", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, t.block, "user.gpucache.pinned", "1"); }, 0},
      {"unpin a block", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, t.block, "user.gpucache.pinned", "0"); }, 0},
      {"pin with a bad value", kMembers, [](Table& t, const Principal& c) { return t.SetX(c, t.block, "user.gpucache.pinned", "2"); }, EINVAL},
      {"read-open a block", kMembers, [](Table& t, const Principal& c) { return t.Open(c, t.block, O_RDONLY); }, 0},
      {"create a non-.part name", kMembers, [](Table& t, const Principal& c) { return t.Create(c, t.ns, std::string(32, 'c')); }, EINVAL},
      {"create a .part of no block name", kMembers, [](Table& t, const Principal& c) { return t.Create(c, t.ns, "x.part"); }, EINVAL},
      {"mkdir a name that is no namespace", kMembers, [](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, t.tenant, "x")).err; }, EINVAL},
      {"mkdir an existing namespace", kMembers, [](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, t.tenant, AddressOf(t.b).ns)).err; }, EEXIST},
      {"rmdir a namespace that holds blocks", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RmDir(c, t.tenant, AddressOf(t.b).ns)); }, ENOTEMPTY},
      {"rmdir a namespace that does not exist", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RmDir(c, t.tenant, "m-" + std::string(32, 'd'))); }, ENOENT},
      {"stat a block that is not there (a miss)", kMembers, [](Table& t, const Principal& c) { return t.Lookup(c, t.ns, std::string(32, 'e')); }, ENOENT},
      {"stat a namespace that does not exist", kMembers, [](Table& t, const Principal& c) { return t.Lookup(c, t.tenant, "m-" + std::string(32, 'd')); }, ENOENT},
      {"getxattr fill of a block never filled", kMembers, [](Table& t, const Principal& c) { return t.GetX(c, t.ns, "user.gpucache.fill." + std::string(32, 'e')); }, ENODATA},
  };
}

// EBUSY and EEXIST: a `.part` is its writer's; nobody reads it, nobody else touches it.
std::vector<Row> PartRows() {
  return {
      {"read-open a .part", kMembers, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_RDONLY); }, EBUSY},
      {"second .part create (single flight)", kMembers, [](Table& t, const Principal& c) { return t.Create(c, t.ns, t.P()); }, EEXIST},
      {"create the .part of a committed block", kMembers, [](Table& t, const Principal& c) { return t.Create(c, t.ns, t.B() + ".part"); }, EEXIST},
      {"reopen another's .part O_WRONLY", {kMember}, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_WRONLY); }, EBUSY},
      {"reopen another's .part O_RDWR", {kMember}, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_RDWR); }, EBUSY},
      {"reopen another's .part O_TRUNC", {kMember}, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_WRONLY | O_TRUNC); }, EBUSY},
      {"reopen another's .part O_APPEND", {kMember}, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_WRONLY | O_APPEND); }, EBUSY},
      {"truncate another's .part", {kMember}, [](Table& t, const Principal& c) { return t.SetAttr(c, t.part, kTruncate); }, EBUSY},
      {"set identity on another's .part", {kMember}, [](Table& t, const Principal& c) { return t.SetX(c, t.part, "user.gpucache.identity", "x"); }, EBUSY},
      {"rename another's .part", {kMember}, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, t.ns, t.P(), t.ns, t.PBlock(), 0)); }, EBUSY},
      {"unlink another's .part", {kMember}, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Unlink(c, t.ns, t.P())); }, EBUSY},
      {"rename a .part to another name", kMembers, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, t.ns, t.P(), t.ns, std::string(32, 'f'), 0)); }, EINVAL},

      {"rmdir a namespace that holds a .part only", kMembers, [](Table& t, const Principal& c) {
         // Its own namespace: N also holds B.
         CacheIdentity other = SampleIdentity("acme");
         other.kv_dtype = "fp16";
         t.h.WritePart(other, Bytes(3, 'x'));
         int e = ReplyErrno(t.fs().RmDir(c, t.tenant, AddressOf(other).ns));
         REQUIRE(t.fs().Unlink(kWriter, t.h.Namespace(other), FsHarness::PartName(other)) == StatusCode::kOk);
         return e;
       }, ENOTEMPTY},
  };
}

// EACCES: another tenant's paths, and the nodes below them even when their inode is known.
std::vector<Row> OutsiderRows() {
  return {
      {"walk into another tenant", kOutsiders, [](Table& t, const Principal& c) { return t.Lookup(c, kRootIno, "acme"); }, EACCES},
      {"stat another tenant's directory", kOutsiders, [](Table& t, const Principal& c) { return ReplyToAttr(t.fs().GetAttr(c, t.tenant)).err; }, EACCES},
      {"stat another tenant's block", kOutsiders, [](Table& t, const Principal& c) { return ReplyToAttr(t.fs().GetAttr(c, t.block)).err; }, EACCES},
      {"stat another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return ReplyToAttr(t.fs().GetAttr(c, t.part)).err; }, EACCES},
      {"look a name up in another tenant's namespace", kOutsiders, [](Table& t, const Principal& c) { return t.Lookup(c, t.ns, t.B()); }, EACCES},
      {"open another tenant's block", kOutsiders, [](Table& t, const Principal& c) { return t.Open(c, t.block, O_RDONLY); }, EACCES},
      {"read-open another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_RDONLY); }, EACCES},
      {"write-open another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return t.Open(c, t.part, O_WRONLY); }, EACCES},
      {"list another tenant's directory", kOutsiders, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().ReadDir(c, t.tenant).status()); }, EACCES},
      {"list another tenant's namespace", kOutsiders, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().ReadDir(c, t.ns).status()); }, EACCES},
      {"mkdir in another tenant", kOutsiders, [](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, t.tenant, AddressOf(t.b).ns)).err; }, EACCES},
      {"create a .part in another tenant", kOutsiders, [](Table& t, const Principal& c) { return t.Create(c, t.ns, std::string(32, 'a') + ".part"); }, EACCES},
      {"getxattr on another tenant's block", kOutsiders, [](Table& t, const Principal& c) { return t.GetX(c, t.block, "user.gpucache.state"); }, EACCES},
      {"getxattr of a fill in another tenant", kOutsiders, [](Table& t, const Principal& c) { return t.GetX(c, t.ns, "user.gpucache.fill." + t.PBlock()); }, EACCES},
      {"pin another tenant's block", kOutsiders, [](Table& t, const Principal& c) { return t.SetX(c, t.block, "user.gpucache.pinned", "1"); }, EACCES},
      {"set identity on another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return t.SetX(c, t.part, "user.gpucache.identity", "x"); }, EACCES},
      {"truncate another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return t.SetAttr(c, t.part, kTruncate); }, EACCES},
      {"unlink another tenant's block", kOutsiders, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Unlink(c, t.ns, t.B())); }, EACCES},
      {"unlink another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Unlink(c, t.ns, t.P())); }, EACCES},
      {"commit another tenant's .part", kOutsiders, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, t.ns, t.P(), t.ns, t.PBlock(), 0)); }, EACCES},
      {"rmdir another tenant's namespace", kOutsiders, [](Table& t, const Principal& c) { return ReplyErrno(t.fs().RmDir(c, t.tenant, AddressOf(t.b).ns)); }, EACCES},
  };
}

// ENAMETOOLONG: NAME_MAX is 255 bytes, and no node here has a longer name.
std::vector<Row> NameRows() {
  const std::string n256(256, 'a');
  return {
      {"stat a 255-byte name (a miss)", kMembers, [](Table& t, const Principal& c) { return t.Lookup(c, t.ns, std::string(255, 'a')); }, ENOENT},
      {"stat a 256-byte name in a namespace", kMembers, [=](Table& t, const Principal& c) { return t.Lookup(c, t.ns, n256); }, ENAMETOOLONG},
      {"stat a 256-byte name in a tenant", kMembers, [=](Table& t, const Principal& c) { return t.Lookup(c, t.tenant, n256); }, ENAMETOOLONG},
      {"stat a 256-byte name in the root", kMembers, [=](Table& t, const Principal& c) { return t.Lookup(c, kRootIno, n256); }, ENAMETOOLONG},
      {"mkdir a 256-byte namespace", kMembers, [=](Table& t, const Principal& c) { return ReplyToEntry(t.fs().MkDir(c, t.tenant, n256)).err; }, ENAMETOOLONG},
      {"create a 256-byte .part", kMembers, [=](Table& t, const Principal& c) { return t.Create(c, t.ns, n256.substr(5) + ".part"); }, ENAMETOOLONG},
      {"unlink a 256-byte name", kMembers, [=](Table& t, const Principal& c) { return ReplyErrno(t.fs().Unlink(c, t.ns, n256)); }, ENAMETOOLONG},
      {"rmdir a 256-byte name", kMembers, [=](Table& t, const Principal& c) { return ReplyErrno(t.fs().RmDir(c, t.tenant, n256)); }, ENAMETOOLONG},
      {"rename a .part to a 256-byte name", kMembers, [=](Table& t, const Principal& c) { return ReplyErrno(t.fs().Rename(c, t.ns, t.P(), t.ns, n256, 0)); }, ENAMETOOLONG},
      {"symlink a 256-byte name", kMembers, [=](Table& t, const Principal& c) { return ReplyErrno(t.fs().RefuseNewEntry(c, t.ns, n256)); }, ENAMETOOLONG},
  };
}

// clang-format on

void RunTable(const std::string& permissions) {
  Table t(permissions);
  for (auto rows : {DaemonRows(), BlockRows(), PartRows(), OutsiderRows(), NameRows()}) {
    for (const Row& row : rows) {
      for (const Principal& c : row.who) {
        CAPTURE(permissions);
        CAPTURE(row.what);
        CAPTURE(c.uid);
        CHECK(row.op(t, c) == row.want);
      }
    }
  }
  // Nothing above changed the `.part` or the block (the last pin request unpinned it).
  CHECK(t.h.PartSize(t.p) == 10);
  Result<Bytes> got = t.h.ReadBlock(t.b);
  REQUIRE(got.ok());
  CHECK(got.value() == Payload(5000));
  Result<std::string> pinned = t.fs().GetXattr(kRoot, t.block, "user.gpucache.pinned");
  REQUIRE(pinned.ok());
  CHECK(pinned.value() == "0");
}

// The daemon answers each request the same whichever mode checks path walks (adr/0009): the
// kernel's mode bits only decide who may ask.
TEST_CASE("Filesystem: the errno table of the user guide, daemon permissions") {
  RunTable("daemon");
}

TEST_CASE("Filesystem: the errno table of the user guide, kernel permissions") {
  RunTable("kernel");
}

}  // namespace
}  // namespace gpucache
