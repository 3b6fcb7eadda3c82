// Limits and eviction through a real mount: every errno of admission, and eviction rules.
#include <doctest/doctest.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// A distinct full block per (tenant, n) in one namespace.
CacheIdentity Block(const std::string& tenant, uint8_t n) {
  CacheIdentity id = SampleIdentity(tenant, 16);
  id.chain[0] = Hash(n);
  return id;
}

bool Present(const MountClient& client, const CacheIdentity& id) {
  struct stat st;
  return ::stat(client.PathOf(id).c_str(), &st) == 0;
}

TEST_CASE("Mount limits: a block over max_block_bytes is EFBIG") {
  MountedFs m(TestConfig("", "max_block_bytes = 4096"));
  MountClient client(m.mnt());
  CHECK(client.Commit(Block("acme", 1), Payload(4097)) == EFBIG);
  CHECK_FALSE(Present(client, Block("acme", 1)));
  CHECK(client.Commit(Block("acme", 1), Payload(4096)) == 0);
  CHECK(AsUser(2000, 2000, [&] { return client.Commit(Block("globex", 2), Payload(8192)); }) == 0);
}

TEST_CASE("Mount limits: in-flight requests, in-flight bytes, registrations are EAGAIN") {
  MountedFs m(TestConfig("max_registrations = 3",
                         "max_inflight_requests = 1\nmax_inflight_bytes = 10000"));
  MountClient client(m.mnt());
  CacheIdentity a = Block("acme", 1), b = Block("acme", 2);
  REQUIRE(::mkdir(NsDir(m, a).c_str(), 0770) == 0);
  int fd = ::open((client.PathOf(a) + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  CHECK(Errno(::open((client.PathOf(b) + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)) == EAGAIN);
  Bytes big = Payload(10001);
  CHECK(Errno(::write(fd, big.data(), big.size())) == EAGAIN);
  CHECK(::write(fd, big.data(), 10000) == 10000);
  ::close(fd);
  REQUIRE(::unlink((client.PathOf(a) + ".part").c_str()) == 0);
  // Registrations: reservations + committed + quarantined, across tenants. Committed blocks
  // give theirs up like bytes (the oldest of a tenant above its share first); pinned ones
  // cannot, and then a new fill is EAGAIN.
  REQUIRE(client.Commit(Block("acme", 3), Payload(10)) == 0);
  REQUIRE(client.Commit(Block("acme", 4), Payload(10)) == 0);
  REQUIRE(AsUser(2000, 2000, [&] { return client.Commit(Block("globex", 5), Payload(10)); }) == 0);
  REQUIRE(client.Commit(Block("acme", 6), Payload(10)) == 0);
  struct stat st;
  CHECK(Errno(::stat(client.PathOf(Block("acme", 3)).c_str(), &st)) == ENOENT);
  for (uint8_t n : {4, 6}) {
    REQUIRE(::setxattr(client.PathOf(Block("acme", n)).c_str(), "user.gpucache.pinned", "1", 1, 0) == 0);
  }
  REQUIRE(::setxattr(client.PathOf(Block("globex", 5)).c_str(), "user.gpucache.pinned", "1", 1, 0) == 0);
  CHECK(client.Commit(Block("acme", 7), Payload(10)) == EAGAIN);
  // globex at its share keeps its block; acme's own are pinned.
  CHECK(AsUser(2000, 2000, [&] { return Errno(::stat(client.PathOf(Block("globex", 5)).c_str(), &st)); }) == 0);
}

TEST_CASE("Mount eviction: a tenant quota evicts only the tenant's own unpinned blocks") {
  MountedFs m(TestConfig("", "max_retained_bytes = 30000"));
  MountClient client(m.mnt());
  REQUIRE(AsUser(2000, 2000, [&] { return client.Commit(Block("globex", 9), Payload(50000)); }) == 0);
  for (uint8_t i = 1; i <= 3; ++i) REQUIRE(client.Commit(Block("acme", i), Payload(10000, i)) == 0);
  REQUIRE(::setxattr(client.PathOf(Block("acme", 1)).c_str(), "user.gpucache.pinned", "1", 1, 0) == 0);
  REQUIRE(client.Commit(Block("acme", 4), Payload(10000, 4)) == 0);
  CHECK(Present(client, Block("acme", 1)));        // pinned
  CHECK_FALSE(Present(client, Block("acme", 2)));  // the oldest unpinned (used least recently)
  CHECK(Present(client, Block("acme", 3)));
  CHECK(Present(client, Block("acme", 4)));
  CHECK(AsUser(2000, 2000, [&] { return Present(client, Block("globex", 9)) ? 0 : 1; }) == 0);
  char v[4];
  CHECK(::getxattr(client.PathOf(Block("acme", 1)).c_str(), "user.gpucache.pinned", v, 4) == 1);
  CHECK(v[0] == '1');
  CHECK(ReadText(m.mnt() + "/.gpucache/stats").find(" evictions=1 ") != std::string::npos);
}

TEST_CASE("Mount eviction: nothing evictable is EDQUOT for a tenant quota, ENOSPC globally") {
  MountedFs m(TestConfig("max_retained_bytes = 50000", "max_retained_bytes = 20000"));
  MountClient client(m.mnt());
  REQUIRE(client.Commit(Block("acme", 1), Payload(10000)) == 0);
  REQUIRE(client.Commit(Block("acme", 2), Payload(10000)) == 0);
  for (uint8_t i : {1, 2}) {
    REQUIRE(::setxattr(client.PathOf(Block("acme", i)).c_str(), "user.gpucache.pinned", "1", 1, 0) == 0);
  }
  CHECK(client.Commit(Block("acme", 3), Payload(10000)) == EDQUOT);
  CHECK(Present(client, Block("acme", 1)));
  CHECK(Present(client, Block("acme", 2)));
  // The global limit: globex fills the rest, then a pinned globex block leaves nothing.
  REQUIRE(AsUser(2000, 2000, [&] { return client.Commit(Block("globex", 4), Payload(30000)); }) == 0);
  REQUIRE(AsUser(2000, 2000, [&] {
            return Errno(::setxattr(client.PathOf(Block("globex", 4)).c_str(), "user.gpucache.pinned", "1", 1, 0));
          }) == 0);
  CHECK(AsUser(2000, 2000, [&] { return client.Commit(Block("globex", 5), Payload(1000)); }) == ENOSPC);
}

TEST_CASE("Mount eviction: an evicted block is a miss at once, even though the kernel cached it") {
  MountedFs m(TestConfig("", "max_retained_bytes = 20000"));
  MountClient client(m.mnt());
  REQUIRE(client.Commit(Block("acme", 1), Payload(10000)) == 0);
  REQUIRE(client.Commit(Block("acme", 2), Payload(10000)) == 0);
  REQUIRE(Present(client, Block("acme", 1)));  // entries and attributes now cached
  REQUIRE(std::holds_alternative<Bytes>(client.Read(Block("acme", 1))));
  REQUIRE(std::holds_alternative<Bytes>(client.Read(Block("acme", 2))));  // 1 is now the LRU
  // The RAM tier copies both in the background after their reads' releases (adr/0020); a
  // block being copied has an open reader, which no eviction takes. Wait for both copies.
  auto copied = [&] {
    std::string metrics = ReadText(m.mnt() + "/.gpucache/metrics");
    return metrics.find("\ngpucache_ram_copies 2\n") != std::string::npos &&
           metrics.find("\ngpucache_ram_promotions_pending 0\n") != std::string::npos;
  };
  for (int i = 0; i < 3000 && !copied(); ++i) ::usleep(10000);
  REQUIRE(copied());
  REQUIRE(client.Commit(Block("acme", 3), Payload(10000)) == 0);
  // The daemon told the kernel to forget the entry: no stale hit.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !Present(client, Block("acme", 1));
    if (!gone) ::usleep(10000);
  }
  CHECK(gone);
  CHECK(std::get<int>(client.Read(Block("acme", 1))) == ENOENT);
}

TEST_CASE("Mount: only a member may pin, with 0 or 1") {
  MountedFs m;
  MountClient client(m.mnt());
  REQUIRE(client.Commit(Block("acme", 1), Payload(100)) == 0);
  std::string path = client.PathOf(Block("acme", 1));
  CHECK(Errno(::setxattr(path.c_str(), "user.gpucache.pinned", "yes", 3, 0)) == EINVAL);
  CHECK(AsUser(2000, 2000, [&] { return Errno(::setxattr(path.c_str(), "user.gpucache.pinned", "1", 1, 0)); }) ==
        EACCES);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::setxattr(path.c_str(), "user.gpucache.pinned", "1", 1, 0)); }) == 0);
}

// A process of `uid` (in no tenant: anyone on the host) that opens `path` until refused and holds
// what it opened until told to let go (Release), then opens it once more.
class Hog {
 public:
  Hog(const std::string& path, uid_t uid) {
    REQUIRE(::pipe(held_) == 0);
    REQUIRE(::pipe(go_) == 0);
    pid_ = ::fork();
    if (pid_ == 0) Run(path, uid);
    ::close(held_[1]);
    ::close(go_[0]);
  }
  // How many it held when it was refused with EAGAIN; -1 if it was refused otherwise or died.
  long Held() {
    long n = -1;
    if (::read(held_[0], &n, sizeof n) != sizeof n) return -1;
    return n;
  }
  // Lets go; the exit status (0: its open after the release worked).
  int Release() {
    (void)!::write(go_[1], "g", 1);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::close(held_[0]);
    ::close(go_[1]);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  }

 private:
  [[noreturn]] void Run(const std::string& path, uid_t uid) {
    rlimit fds{200000, 200000};
    if (::setrlimit(RLIMIT_NOFILE, &fds) != 0 && ::getrlimit(RLIMIT_NOFILE, &fds) == 0) {
      fds.rlim_cur = fds.rlim_max;  // a container without CAP_SYS_RESOURCE: as many as allowed
      ::setrlimit(RLIMIT_NOFILE, &fds);
    }
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) {
      ::_exit(10);
    }
    std::vector<int> open_fds;
    long n = -1;
    for (;;) {
      int fd = ::open(path.c_str(), O_RDONLY);
      if (fd >= 0) {
        open_fds.push_back(fd);
        continue;
      }
      if (errno == EAGAIN) n = static_cast<long>(open_fds.size());
      break;
    }
    char c;
    if (::write(held_[1], &n, sizeof n) != sizeof n || ::read(go_[0], &c, 1) != 1) ::_exit(12);
    for (int fd : open_fds) ::close(fd);
    ::_exit(::open(path.c_str(), O_RDONLY) >= 0 ? 0 : 13);  // given back at the release
  }
  pid_t pid_ = -1;
  int held_[2], go_[2];
};

// Regression (review, 2026-12-07): each open of a directory or of a `.gpucache` file held its
// own copy of the listing or text until its release, bounded by nothing: one uid opening a
// listing thousands of times took the daemon to 8 GB, and any uid can open the metrics. Then,
// bounded per uid only, four uids of no tenant took the room of every other caller. The copies
// a uid's handles hold are now bounded (16 MiB for a uid of no tenant, 128 MiB for a member),
// uids of no tenant have a pool of their own (64 MiB), and a member's opens go on.
TEST_CASE("Mount limits: the copies one uid's open handles hold are bounded, and no other uid's") {
  MountedFs m;
  const std::string metrics = m.mnt() + "/.gpucache/metrics";
  std::vector<std::unique_ptr<Hog>> hogs;
  for (uid_t uid = 4242; uid < 4247; ++uid) {
    hogs.push_back(std::make_unique<Hog>(metrics, uid));
    long held = hogs.back()->Held();
    CAPTURE(uid);
    CHECK(held >= 0);  // refused with EAGAIN
    if (uid == 4242) CHECK(held > 1000);  // after many opens
  }
  // Meanwhile a tenant's member opens the same file, and lists its tenant.
  CHECK(AsUser(1000, 1000, [&] {
          int fd = ::open(metrics.c_str(), O_RDONLY);
          if (fd < 0) return errno;
          ::close(fd);
          DIR* d = ::opendir((m.mnt() + "/acme").c_str());
          if (!d) return errno;
          ::closedir(d);
          return 0;
        }) == 0);
  for (auto& hog : hogs) CHECK(hog->Release() == 0);
}

}  // namespace
}  // namespace gpucache
