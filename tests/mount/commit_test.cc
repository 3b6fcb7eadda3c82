// The commit protocol and verified reads through a real mount.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/xattr.h>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

TEST_CASE("Mount: commit then exact hit returns identical bytes") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(3 * 1024 * 1024 + 17);
  REQUIRE(client.Commit(id, payload) == 0);

  struct stat st;
  REQUIRE(::stat(client.PathOf(id).c_str(), &st) == 0);
  CHECK(st.st_size == static_cast<off_t>(payload.size()));
  CHECK((st.st_mode & 0777) == 0444);
  CHECK(st.st_uid == 0);
  auto got = client.Read(id);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == payload);
  // The .part is gone; only the block is listed.
  CHECK(::access((client.PathOf(id) + ".part").c_str(), F_OK) == -1);
}

TEST_CASE("Mount: a miss is ENOENT") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  struct stat st;
  CHECK(Errno(::stat(client.PathOf(id).c_str(), &st)) == ENOENT);
  CHECK(Errno(::open(client.PathOf(id).c_str(), O_RDONLY)) == ENOENT);
  auto got = client.Read(id);
  CHECK(std::get<int>(got) == ENOENT);
  // A cached miss is refreshed by the commit.
  REQUIRE(client.Commit(id, Payload(100)) == 0);
  CHECK(::stat(client.PathOf(id).c_str(), &st) == 0);
}

TEST_CASE("Mount: a second .part create is EEXIST (single flight)") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  std::string part = MountClient(m.mnt()).PathOf(id) + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  CHECK(Errno(::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)) == EEXIST);
  // Another member of the tenant joins the same fill: EEXIST too, and it cannot read the .part.
  CHECK(AsUser(1000, 1000, [&] { return Errno(::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)); }) ==
        EEXIST);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::open(part.c_str(), O_RDONLY)); }) == EBUSY);
  ::close(fd);
  // Once committed, a new .part for the same block is EEXIST as well.
  Bytes ident = EncodePhysicalKey(id);
  REQUIRE(::setxattr(part.c_str(), "user.gpucache.identity", ident.data(), ident.size(), 0) == 0);
  fd = ::open(part.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "kv", 2) == 2);
  ::close(fd);
  REQUIRE(::rename(part.c_str(), MountClient(m.mnt()).PathOf(id).c_str()) == 0);
  CHECK(Errno(::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)) == EEXIST);
}

TEST_CASE("Mount: committed blocks are immutable (EPERM)") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(5000);
  REQUIRE(client.Commit(id, payload) == 0);
  std::string path = client.PathOf(id);
  CHECK(Errno(::open(path.c_str(), O_WRONLY)) == EPERM);
  CHECK(Errno(::open(path.c_str(), O_RDWR)) == EPERM);
  CHECK(Errno(::open(path.c_str(), O_RDONLY | O_TRUNC)) == EPERM);
  CHECK(Errno(::open(path.c_str(), O_WRONLY | O_APPEND)) == EPERM);
  CHECK(Errno(::truncate(path.c_str(), 0)) == EPERM);
  CHECK(Errno(::chmod(path.c_str(), 0666)) == EPERM);
  CHECK(Errno(::chown(path.c_str(), 1000, 1000)) == EPERM);
  Bytes ident = EncodePhysicalKey(id);
  CHECK(Errno(::setxattr(path.c_str(), "user.gpucache.identity", ident.data(), ident.size(), 0)) == EPERM);
  CHECK(Errno(::setxattr(path.c_str(), "user.gpucache.state", "x", 1, 0)) == EPERM);
  CHECK(Errno(::removexattr(path.c_str(), "user.gpucache.state")) == EPERM);
  CHECK(std::get<Bytes>(client.Read(id)) == payload);  // nothing changed
}

TEST_CASE("Mount: a bad or mismatched identity fails the rename with EINVAL") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  std::string final_path = client.PathOf(id), part = final_path + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);

  SUBCASE("garbage") { REQUIRE(WritePart(part, Bytes{'G', 'P', 'C', 'K', 9}, Payload(100)) == 0); }
  SUBCASE("valid identity of another block") {
    REQUIRE(WritePart(part, EncodePhysicalKey(SampleIdentity("acme", 3)), Payload(100)) == 0);
  }
  SUBCASE("another tenant's identity") {
    CacheIdentity forged = SampleIdentity("globex");
    REQUIRE(WritePart(part, EncodePhysicalKey(forged), Payload(100)) == 0);
  }
  SUBCASE("no identity at all") {
    int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    REQUIRE(::write(fd, "abc", 3) == 3);
    ::close(fd);
  }
  CHECK(Errno(::rename(part.c_str(), final_path.c_str())) == EINVAL);
  struct stat st;
  CHECK(Errno(::stat(final_path.c_str(), &st)) == ENOENT);  // nothing committed
  CHECK(::stat(part.c_str(), &st) == 0);                    // the writer can still fix it
  Bytes good = EncodePhysicalKey(id);
  REQUIRE(::setxattr(part.c_str(), "user.gpucache.identity", good.data(), good.size(), 0) == 0);
  CHECK(::rename(part.c_str(), final_path.c_str()) == 0);
}

TEST_CASE("Mount: renaming a .part that is still open for writing is EBUSY") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  std::string final_path = MountClient(m.mnt()).PathOf(id), part = final_path + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  Bytes ident = EncodePhysicalKey(id);
  REQUIRE(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), 0) == 0);
  REQUIRE(::write(fd, "abc", 3) == 3);
  CHECK(Errno(::rename(part.c_str(), final_path.c_str())) == EBUSY);
  ::close(fd);
  CHECK(::rename(part.c_str(), final_path.c_str()) == 0);
}

TEST_CASE("Mount: only the commit rename exists") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity a = SampleIdentity("acme", 2), b = SampleIdentity("acme", 3);
  REQUIRE(client.Commit(a, Payload(10)) == 0);
  REQUIRE(client.Commit(b, Payload(10)) == 0);
  CHECK(Errno(::rename(client.PathOf(a).c_str(), client.PathOf(b).c_str())) == EPERM);
  CHECK(Errno(::rename(client.PathOf(a).c_str(), (client.PathOf(a) + "x").c_str())) == EPERM);
  CHECK(Errno(::link(client.PathOf(a).c_str(), (NsDir(m, a) + "/link").c_str())) == EPERM);
  CHECK(Errno(::symlink("/etc/passwd", (NsDir(m, a) + "/sym").c_str())) == EPERM);
  CHECK(Errno(::mkfifo((NsDir(m, a) + "/fifo").c_str(), 0600)) == EPERM);
  CHECK(Errno(::open((NsDir(m, a) + "/notablock").c_str(), O_CREAT | O_WRONLY, 0600)) == EINVAL);
  // The root is the daemon's (0755 root): EACCES, as the kernel answers there (issue 13).
  CHECK(Errno(::mkdir((m.mnt() + "/newtenant").c_str(), 0700)) == EACCES);
  CHECK(Errno(::mkdir((m.mnt() + "/acme/not-a-namespace").c_str(), 0700)) == EINVAL);
}

// Regression (review, 2026-12-07): renameat2's RENAME_WHITEOUT committed the block and made no
// whiteout, and setxattr's XATTR_CREATE and XATTR_REPLACE were ignored.
TEST_CASE("Mount: rename and setxattr flags gpucache cannot honour are refused, not ignored") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  std::string final_path = client.PathOf(id), part = final_path + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  Bytes ident = EncodePhysicalKey(id);
  CHECK(Errno(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), XATTR_REPLACE)) == ENODATA);
  REQUIRE(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), XATTR_CREATE) == 0);
  CHECK(Errno(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), XATTR_CREATE)) == EEXIST);
  CHECK(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), XATTR_REPLACE) == 0);
  REQUIRE(::write(fd, "abc", 3) == 3);
  ::close(fd);
  CHECK(Errno(::renameat2(AT_FDCWD, part.c_str(), AT_FDCWD, final_path.c_str(), RENAME_WHITEOUT)) == EINVAL);
  CHECK(Errno(::access(final_path.c_str(), F_OK)) == ENOENT);  // nothing committed
  CHECK(::renameat2(AT_FDCWD, part.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE) == 0);
  CHECK(Errno(::setxattr(final_path.c_str(), "user.gpucache.pinned", "1", 1, XATTR_CREATE)) == EEXIST);
  CHECK(::setxattr(final_path.c_str(), "user.gpucache.pinned", "1", 1, XATTR_REPLACE) == 0);
}

TEST_CASE("Mount: xattrs outside user.gpucache are not supported") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(10)) == 0);
  std::string path = client.PathOf(id);
  char buf[64];
  for (const char* name : {"user.other", "trusted.x", "security.selinux"}) {
    CAPTURE(name);
    CHECK(Errno(::getxattr(path.c_str(), name, buf, sizeof buf)) == ENOTSUP);
    CHECK(Errno(::setxattr(path.c_str(), name, "v", 1, 0)) == ENOTSUP);
  }
  CHECK(Errno(::getxattr(path.c_str(), "user.gpucache.nope", buf, sizeof buf)) == ENODATA);
}

TEST_CASE("Mount: xattrs tell a person what a block is") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(1000);
  REQUIRE(client.Commit(id, payload) == 0);
  std::string path = client.PathOf(id);
  auto get = [&](const char* name) {
    char buf[8192];
    ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof buf);
    return n < 0 ? std::string("<errno ") + std::to_string(errno) + ">" : std::string(buf, n);
  };
  CHECK(get("user.gpucache.state") == "COMMITTED");
  CHECK(get("user.gpucache.valid_length") == "256");
  CHECK(get("user.gpucache.epoch") == ReadText(m.mnt() + "/.gpucache/epoch").substr(0, 1));
  CHECK(get("user.gpucache.checksum").rfind("xxh3-128:", 0) == 0);
  CHECK(get("user.gpucache.identity_text") == RenderIdentity(id));
  Bytes raw = EncodePhysicalKey(id);
  CHECK(get("user.gpucache.identity") == std::string(raw.begin(), raw.end()));
  char names[4096];
  ssize_t n = ::listxattr(path.c_str(), names, sizeof names);
  REQUIRE(n > 0);
  CHECK(std::string(names, n).find("user.gpucache.region") != std::string::npos);
}

// An engine holding a block open reads its xattrs through the handle's inode; once the block
// left the namespace (invalidated, evicted) they answer ENOENT, as its stat does: a missing
// block, not a missing attribute (ENODATA, which the Python client took for an I/O error).
TEST_CASE("Mount: xattrs of a block that left while open answer ENOENT, not ENODATA") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(100)) == 0);
  int fd = ::open(client.PathOf(id).c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  char buf[4096];
  REQUIRE(::fgetxattr(fd, "user.gpucache.checksum", buf, sizeof buf) > 0);
  REQUIRE(::unlink(client.PathOf(id).c_str()) == 0);
  for (const char* name : {"user.gpucache.checksum", "user.gpucache.state", "user.gpucache.nope"}) {
    CAPTURE(name);
    CHECK(Errno(::fgetxattr(fd, name, buf, sizeof buf)) == ENOENT);
  }
  CHECK(Errno(::flistxattr(fd, buf, sizeof buf)) == ENOENT);
  ::close(fd);
}

TEST_CASE("Mount: unlink of a block invalidates it, unlink of a .part abandons it") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(100)) == 0);
  REQUIRE(::unlink(client.PathOf(id).c_str()) == 0);
  struct stat st;
  CHECK(Errno(::stat(client.PathOf(id).c_str(), &st)) == ENOENT);
  std::string part = client.PathOf(id) + ".part";
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  REQUIRE(::unlink(part.c_str()) == 0);
  CHECK(client.Commit(id, Payload(100)) == 0);  // the block can be filled again
}

TEST_CASE("Mount: listings show namespaces, blocks and reservations") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity a = SampleIdentity("acme", 2), b = SampleIdentity("acme", 3);
  REQUIRE(client.Commit(a, Payload(10)) == 0);
  int fd = ::open((client.PathOf(b) + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  std::string cmd = "ls -a " + NsDir(m, a) + " > " + m.data() + "/../ls.txt";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string ls = ReadText(m.data() + "/../ls.txt");
  CHECK(ls.find(AddressOf(a).block + "\n") != std::string::npos);
  CHECK(ls.find(AddressOf(b).block + ".part\n") != std::string::npos);
  ::close(fd);
}

}  // namespace
}  // namespace gpucache
