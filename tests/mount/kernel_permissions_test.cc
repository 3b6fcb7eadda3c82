// fuse.permissions = "kernel" (adr/0009): the kernel checks mode bits on every path walk, the
// tenant entries are cached, and isolation still holds, through a real mount.
#include <dirent.h>
#include <fcntl.h>
#include <doctest/doctest.h>
#include <errno.h>

#include <variant>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// acme: uid 1000 and group 3000; globex: uid 2000 alone.
std::string KernelConfig(const std::string& permissions = "kernel") {
  return TestConfig("", "gids = [3000]") + "permissions = \"" + permissions + "\"\n";
}

// How many LOOKUPs the daemon has answered (its own counter, read through the mount).
double Lookups(const MountedFs& m) {
  std::istringstream in(ReadText(m.mnt() + "/.gpucache/metrics"));
  const std::string key = "gpucache_fuse_op_seconds_count{op=\"lookup\"} ";
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key)) return std::stod(line.substr(key.size()));
  }
  return -1;
}

TEST_CASE("Kernel permissions: another tenant's uid gets EACCES, even on entries the kernel cached") {
  MountedFs m(KernelConfig());
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  Bytes payload = Payload(4096);
  REQUIRE(client.Commit(id, payload) == 0);
  std::string block = client.PathOf(id);
  struct stat st;
  REQUIRE(::stat(block.c_str(), &st) == 0);  // root walked it: every component is cached

  REQUIRE(::stat((m.mnt() + "/acme").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0770);
  CHECK(st.st_uid == 1000);
  CHECK(st.st_gid == 3000);

  for (uid_t outsider : {2000u, 3001u}) {  // globex's uid, and a uid in no tenant
    auto as = [&](const std::function<int()>& fn) { return AsUser(outsider, outsider, fn); };
    // As for any Unix directory, the tenant directory's own attributes are visible; nothing
    // below it is, and it cannot be listed.
    CHECK(as([&] { return Errno(::stat((m.mnt() + "/acme/.").c_str(), &st)); }) == EACCES);
    CHECK(as([&] { return Errno(::opendir((m.mnt() + "/acme").c_str()) ? 0 : -1); }) == EACCES);
    CHECK(as([&] { return Errno(::stat(block.c_str(), &st)); }) == EACCES);
    CHECK(as([&] { return Errno(::open(block.c_str(), O_RDONLY)); }) == EACCES);
    CHECK(as([&] { return Errno(::chdir(NsDir(m, id).c_str())); }) == EACCES);
    CHECK(as([&] { return Errno(::stat((NsDir(m, id) + "/" + std::string(32, '0')).c_str(), &st)); }) ==
          EACCES);
    CHECK(as([&] { return Errno(::mkdir((m.mnt() + "/acme/x").c_str(), 0700)); }) == EACCES);
  }
  // globex's own directory is its uid's alone.
  REQUIRE(::stat((m.mnt() + "/globex").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
  CHECK(st.st_uid == 2000);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::stat((m.mnt() + "/globex/.").c_str(), &st)); }) == EACCES);
}

TEST_CASE("Kernel permissions: members by uid, primary group or supplementary group read and commit") {
  MountedFs m(KernelConfig());
  MountClient client(m.mnt());
  CacheIdentity first = SampleIdentity("acme");
  Bytes payload = Payload(8192, 7);
  // uid 1000 (the tenant's owner uid) creates the namespace and commits.
  REQUIRE(AsUser(1000, 1000, [&] { return client.Commit(first, payload); }) == 0);
  auto reads_back = [&] {
    auto got = client.Read(first);
    return std::holds_alternative<Bytes>(got) && std::get<Bytes>(got) == payload ? 0 : 1;
  };
  CHECK(AsUser(1000, 1000, reads_back) == 0);
  CHECK(AsUser(4000, 3000, reads_back) == 0);                          // primary group
  CHECK(AsUser(4001, 4001, std::vector<gid_t>{5, 3000}, reads_back) == 0);  // supplementary
  CHECK(AsUser(4002, 4002, std::vector<gid_t>{5}, reads_back) != 0);
  struct stat st;
  CHECK(AsUser(4002, 4002, std::vector<gid_t>{5},
               [&] { return Errno(::stat(client.PathOf(first).c_str(), &st)); }) == EACCES);

  // A group member commits into the namespace uid 1000 created: the group may write it.
  CacheIdentity second = SampleIdentity("acme");
  second.chain[0][0] ^= 0x5a;
  CHECK(AsUser(4001, 4001, std::vector<gid_t>{3000}, [&] { return client.Commit(second, payload); }) == 0);
  REQUIRE(::stat(client.PathOf(second).c_str(), &st) == 0);
  // Blocks carry the tenant's owner and group, so every member may pin them (mode bits only
  // say who may ask; the daemon refuses writes); who committed one is its owner xattr.
  CHECK(st.st_uid == 1000);
  CHECK(st.st_gid == 3000);
  CHECK((st.st_mode & 07777) == 0660);
  char owner[32] = {};
  CHECK(::getxattr(client.PathOf(second).c_str(), "user.gpucache.owner", owner, sizeof owner - 1) > 0);
  CHECK(std::string(owner) == "4001:4001");
  CHECK(st.st_size == static_cast<off_t>(payload.size()));
}

TEST_CASE("Kernel permissions: warm stats of hits and misses never reach the daemon") {
  auto lookups_for_warm_stats = [](const std::string& permissions) {
    MountedFs m(KernelConfig(permissions));
    MountClient client(m.mnt());
    CacheIdentity id = SampleIdentity("acme");
    REQUIRE(client.Commit(id, Payload(4096)) == 0);
    std::string hit = client.PathOf(id);
    std::string miss = NsDir(m, id) + "/" + std::string(32, 'f');
    struct stat st;
    REQUIRE(::stat(hit.c_str(), &st) == 0);
    REQUIRE(Errno(::stat(miss.c_str(), &st)) == ENOENT);
    // Read the counter once first: the metrics file's own lookups are counted only after
    // their replies, so the first read may not include them yet.
    Lookups(m);
    ::usleep(100 * 1000);
    double before = Lookups(m);
    for (int i = 0; i < 100; ++i) {
      REQUIRE(::stat(hit.c_str(), &st) == 0);
      REQUIRE(Errno(::stat(miss.c_str(), &st)) == ENOENT);
    }
    ::usleep(200 * 1000);  // the last replies' counts are recorded just after they are sent
    return Lookups(m) - before;
  };
  // The daemon's own check revalidates the tenant entry on every walk; the kernel's does not.
  CHECK(lookups_for_warm_stats("daemon") >= 150);  // one per walk into the tenant
  CHECK(lookups_for_warm_stats("kernel") == 0);
}

TEST_CASE("Kernel permissions: a committed block replaces its cached miss") {
  MountedFs m(KernelConfig());
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(client.Commit(SampleIdentity("acme", 2), Payload(10)) == 0);  // the namespace exists
  struct stat st;
  REQUIRE(Errno(::stat(client.PathOf(id).c_str(), &st)) == ENOENT);  // a cached miss
  REQUIRE(AsUser(1000, 1000, [&] { return client.Commit(id, Payload(4096)); }) == 0);
  CHECK(AsUser(4000, 3000, [&] { return Errno(::stat(client.PathOf(id).c_str(), &st)); }) == 0);
  CHECK(::stat(client.PathOf(id).c_str(), &st) == 0);
}

}  // namespace
}  // namespace gpucache
