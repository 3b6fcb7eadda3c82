// A block that leaves the namespace and is committed again under the same name: every open of
// the new block reads the new bytes, never pages the kernel cached for the block that left
// (they share a name, and used to share an inode number and so its page cache).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace
}  // namespace gpucache
