// A block that leaves the namespace and is committed again under the same name: every open of
// the new block reads the new bytes, never pages the kernel cached for the block that left
// (they share a name, and used to share an inode number and so its page cache).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <chrono>
#include <thread>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

enum class Recommit { kChannel, kRename };

// Regression (review, 2026-12-06): the inode table kept mapping a block's name to the inode of
// the block that had left (unlinked, evicted, quarantined) until the kernel forgot it. A reader
// still holding the old block open refilled that inode's pages with the old bytes, the block
// was committed again through the commit channel (no rename to remap the name), and the next
// open of the name got the same inode with keep_cache: it read the bytes the engine had
// invalidated.
void CheckRecommitServesNewBytes(const std::string& config, Recommit how) {
  MountedFs m(config);
  MountClient c(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  Bytes old_bytes = Payload(100000, 1);
  REQUIRE(c.Commit(id, old_bytes) == 0);
  std::string path = c.PathOf(id);
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  Bytes buf(old_bytes.size());
  REQUIRE(::pread(fd, buf.data(), buf.size(), 0) == ssize_t(buf.size()));
  REQUIRE(::unlink(path.c_str()) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the invalidations are sent
  // The old block, still open: read again, its pages cached once more.
  REQUIRE(::pread(fd, buf.data(), buf.size(), 0) == ssize_t(buf.size()));
  CHECK(buf == old_bytes);
  Bytes new_bytes = Payload(100000, 2);
  REQUIRE(new_bytes != old_bytes);
  REQUIRE((how == Recommit::kChannel ? c.Commit(id, new_bytes) : c.CommitByRename(id, new_bytes)) == 0);
  for (int round = 0; round < 2; ++round) {  // a daemon-served open, then one the RAM tier may serve
    CAPTURE(round);
    std::variant<Bytes, int> got = c.Read(id);
    REQUIRE(std::holds_alternative<Bytes>(got));
    CHECK(std::get<Bytes>(got) == new_bytes);
  }
  struct stat old_st, new_st;
  REQUIRE(::fstat(fd, &old_st) == 0);
  REQUIRE(::stat(path.c_str(), &new_st) == 0);
  CHECK(old_st.st_ino != new_st.st_ino);  // two blocks, two inodes: two page caches
  // The old reader still reads what it opened.
  REQUIRE(::pread(fd, buf.data(), buf.size(), 0) == ssize_t(buf.size()));
  CHECK(buf == old_bytes);
  ::close(fd);
}

TEST_CASE("Recommit: a block committed again through the channel after an unlink serves its new bytes") {
  SUBCASE("RAM tier off") { CheckRecommitServesNewBytes("[ram]\nbytes = 0\n" + TestConfig(), Recommit::kChannel); }
  SUBCASE("RAM tier on") { CheckRecommitServesNewBytes(TestConfig(), Recommit::kChannel); }
}

TEST_CASE("Recommit: a block committed again by rename after an unlink serves its new bytes") {
  SUBCASE("RAM tier off") { CheckRecommitServesNewBytes("[ram]\nbytes = 0\n" + TestConfig(), Recommit::kRename); }
  SUBCASE("RAM tier on") { CheckRecommitServesNewBytes(TestConfig(), Recommit::kRename); }
}

// Regression (review, 2026-12-07): an inode stood for its name, so after an unlink and a new
// commit under the name, an open of the old inode (through /proc/PID/fd here; the race of a
// LOOKUP with the replace in general) opened the new block into the old inode's page cache: the
// reader that held the old block read the new block's pages. Its fstat and xattrs told of the
// new block too, and its read to the end stopped at the new block's size, without an error.
void CheckHeldInodeKeepsItsBlock(const std::string& config) {
  MountedFs m(config);
  MountClient c(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  Bytes old_bytes = Payload(1 << 20, 1), new_bytes = Payload(64 << 10, 2);
  REQUIRE(c.Commit(id, old_bytes) == 0);
  std::string path = c.PathOf(id);
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  char old_region[64] = {};
  REQUIRE(::fgetxattr(fd, "user.gpucache.region", old_region, sizeof old_region - 1) > 0);
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(c.Commit(id, new_bytes) == 0);
  // The old inode opens nothing else: ESTALE, not the new block.
  const std::string again = "/proc/self/fd/" + std::to_string(fd);
  errno = 0;
  int reopened = ::open(again.c_str(), O_RDONLY);
  CHECK(reopened == -1);
  CHECK(errno == ESTALE);
  if (reopened >= 0) {
    Bytes sink(1 << 20);
    CHECK(::pread(reopened, sink.data(), sink.size(), 0) >= 0);  // what filled the shared pages
    ::close(reopened);
  }
  // Its own size, its own bytes to the end; its xattrs are not the new block's.
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  CHECK(st.st_size == static_cast<off_t>(old_bytes.size()));
  Bytes got;
  Bytes buf(256 << 10);
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) got.insert(got.end(), buf.begin(), buf.begin() + n);
  CHECK(got.size() == old_bytes.size());
  CHECK(got == old_bytes);
  char region[64] = {};
  errno = 0;
  ssize_t len = ::fgetxattr(fd, "user.gpucache.region", region, sizeof region - 1);
  CHECK((len < 0 ? errno : 0) == ESTALE);
  // The path leads to the new block, as a fresh open and stat say.
  struct stat now {};
  REQUIRE(::stat(path.c_str(), &now) == 0);
  CHECK(now.st_size == static_cast<off_t>(new_bytes.size()));
  CHECK(now.st_ino != st.st_ino);
  std::variant<Bytes, int> fresh = c.Read(id);
  REQUIRE(std::holds_alternative<Bytes>(fresh));
  CHECK(std::get<Bytes>(fresh) == new_bytes);
  ::close(fd);
}

TEST_CASE("Recommit: an inode held open keeps its own block when the name comes back as another") {
  SUBCASE("RAM tier off") { CheckHeldInodeKeepsItsBlock("[ram]\nbytes = 0\n" + TestConfig()); }
  SUBCASE("RAM tier on") { CheckHeldInodeKeepsItsBlock(TestConfig()); }
}

}  // namespace
}  // namespace gpucache
