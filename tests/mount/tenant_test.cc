// Tenant isolation by the caller's uid, through a real mount.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <doctest/doctest.h>
#include <errno.h>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

bool ListsName(const std::string& dir, const std::string& name) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) found |= name == e->d_name;
  ::closedir(d);
  return found;
}

TEST_CASE("Mount: another tenant's uid gets EACCES, even on entries the kernel cached") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  Bytes payload = Payload(4096);
  REQUIRE(client.Commit(id, payload) == 0);
  std::string block = client.PathOf(id);
  // Root (admin) walked every component: the kernel now caches them.
  struct stat st;
  REQUIRE(::stat(block.c_str(), &st) == 0);

  auto as_globex = [&](const std::function<int()>& fn) { return AsUser(2000, 2000, fn); };
  CHECK(as_globex([&] { return Errno(::stat((m.mnt() + "/acme").c_str(), &st)); }) == EACCES);
  CHECK(as_globex([&] { return Errno(::stat(block.c_str(), &st)); }) == EACCES);
  CHECK(as_globex([&] { return Errno(::open(block.c_str(), O_RDONLY)); }) == EACCES);
  CHECK(as_globex([&] { return Errno(::opendir((m.mnt() + "/acme").c_str()) ? 0 : -1); }) == EACCES);
  CHECK(as_globex([&] { return Errno(::chdir(NsDir(m, id).c_str())); }) == EACCES);
  char buf[256];
  CHECK(as_globex([&] { return Errno(::getxattr(block.c_str(), "user.gpucache.state", buf, 256)); }) ==
        EACCES);
  CHECK(as_globex([&] { return Errno(::mkdir((NsDir(m, id) + "x").c_str(), 0700)); }) == EACCES);
  // Guessing a key inside the other tenant tells nothing either.
  CHECK(as_globex([&] { return Errno(::stat((NsDir(m, id) + "/" + std::string(32, '0')).c_str(), &st)); }) ==
        EACCES);
  // The root listing shows only one's own tenants.
  CHECK(as_globex([&] { return ListsName(m.mnt(), "acme") ? 1 : 0; }) == 0);
  CHECK(as_globex([&] { return ListsName(m.mnt(), "globex") ? 0 : 1; }) == 0);
  // A uid in no tenant at all sees neither.
  CHECK(AsUser(3000, 3000, [&] { return Errno(::stat(block.c_str(), &st)); }) == EACCES);

  // A member reads the block; its attributes say who committed it.
  CHECK(AsUser(1000, 1000, [&] {
          auto got = client.Read(id);
          return std::holds_alternative<Bytes>(got) && std::get<Bytes>(got) == payload ? 0 : 1;
        }) == 0);
  CHECK(ListsName(m.mnt(), "acme"));
}

TEST_CASE("Mount: files are owned by the uid and gid that created them") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(AsUser(1000, 1000, [&] { return client.Commit(id, Payload(100)); }) == 0);
  struct stat st;
  REQUIRE(::stat(client.PathOf(id).c_str(), &st) == 0);
  CHECK(st.st_uid == 1000);
  CHECK(st.st_gid == 1000);
  REQUIRE(::stat(NsDir(m, id).c_str(), &st) == 0);
  CHECK(st.st_uid == 1000);
}

TEST_CASE("Mount: a tenant cannot commit into another tenant or take over another's fill") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  std::string part = client.PathOf(id) + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  CHECK(AsUser(2000, 2000, [&] { return Errno(::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)); }) ==
        EACCES);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);  // root's fill
  REQUIRE(fd >= 0);
  ::close(fd);
  // uid 1000 is a member but not the writer: it may neither abandon nor commit the fill
  // (EBUSY: another writer's .part, docs/user-guide.md).
  CHECK(AsUser(1000, 1000, [&] { return Errno(::unlink(part.c_str())); }) == EBUSY);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::rename(part.c_str(), client.PathOf(id).c_str())); }) == EBUSY);
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

TEST_CASE("Mount attacks: dot-dot, overlong names, exchange renames and cross-tenant renames") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity mine = SampleIdentity("acme"), theirs = SampleIdentity("globex");
  REQUIRE(client.Commit(mine, Payload(100)) == 0);
  REQUIRE(AsUser(2000, 2000, [&] { return client.Commit(theirs, Payload(100)); }) == 0);
  struct stat st;
  // Walking out of one's own tenant into another through ".." is still a walk into it.
  std::string sneaky = NsDir(m, mine) + "/../../globex/" + AddressOf(theirs).ns + "/" + AddressOf(theirs).block;
  CHECK(AsUser(1000, 1000, [&] { return Errno(::stat(sneaky.c_str(), &st)); }) == EACCES);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::open(sneaky.c_str(), O_RDONLY)); }) == EACCES);
  // Names past NAME_MAX (255 bytes) name nothing: ENAMETOOLONG on lookup and on create.
  std::string overlong = NsDir(m, mine) + "/" + std::string(300, 'a');
  CHECK(Errno(::stat(overlong.c_str(), &st)) == ENAMETOOLONG);
  CHECK(Errno(::open((overlong + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)) == ENAMETOOLONG);
  // A block name that is not lowercase hex is simply absent; creating it is refused.
  CHECK(Errno(::stat((NsDir(m, mine) + "/" + std::string(32, 'G')).c_str(), &st)) == ENOENT);
  CHECK(Errno(::open((NsDir(m, mine) + "/" + std::string(32, 'G') + ".part").c_str(),
                     O_CREAT | O_EXCL | O_WRONLY, 0600)) == EINVAL);
  // RENAME_EXCHANGE of two committed blocks, and any rename across tenants (root may see both).
  CacheIdentity other = SampleIdentity("acme", 3);
  REQUIRE(client.Commit(other, Payload(100)) == 0);
  CHECK(Errno(::renameat2(AT_FDCWD, client.PathOf(mine).c_str(), AT_FDCWD, client.PathOf(other).c_str(),
                          RENAME_EXCHANGE)) != 0);
  CHECK(Errno(::rename(client.PathOf(mine).c_str(), client.PathOf(theirs).c_str())) == EPERM);
  CHECK(std::get<Bytes>(client.Read(mine)) == Payload(100));  // nothing moved
  CHECK(std::get<Bytes>(client.Read(other)) == Payload(100));
  // A .part renamed into another tenant's namespace is refused too.
  std::string part = client.PathOf(SampleIdentity("acme", 5)) + ".part";
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  CHECK(Errno(::rename(part.c_str(), (NsDir(m, theirs) + "/" + AddressOf(SampleIdentity("acme", 5)).block).c_str())) ==
        EPERM);
}

}  // namespace
}  // namespace gpucache
