// Regression tests for the bugs the reliability suite found, each reduced to its few steps.
#include "tests/reliability/reliability_helpers.h"

namespace gpucache {
namespace {

using namespace test;

void DamagePayloadByte(const MountedFs& m, const CacheIdentity& id, uint64_t at) {
  int fd = ::open(BackingPath(m, id).c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t b = 0;
  REQUIRE(::pread(fd, &b, 1, static_cast<off_t>(64 * 1024 + at)) == 1);
  b ^= 0x10;
  REQUIRE(::pwrite(fd, &b, 1, static_cast<off_t>(64 * 1024 + at)) == 1);
  ::close(fd);
}

// The kernel asked for the attributes (with the open handle) before reading the last chunk;
// the block had just been dropped as corrupt, so the answer was ENOENT and the reader saw ENOENT
// instead of EIO. An open handle now keeps its block's attributes (fs/fuse_ops.cc).
TEST_CASE("Reliability regression: a read that reaches a corrupt last chunk is EIO not ENOENT") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = RelBlock(1);
  Bytes payload = SeededPayload(1, 64 * 1024 + 100);  // two chunks, the second short
  REQUIRE(client.Commit(id, payload) == 0);
  DamagePayloadByte(m, id, 64 * 1024 + 3);
  ReadOutcome r = ReadWhole(client.PathOf(id));
  CHECK(r.err == EIO);
  CHECK(WrongBytes(r.got, payload) == 0);
  CHECK(Counter(m, "checksum_failures") == 1);
  CHECK(WaitForMiss(client.PathOf(id)) == ENOENT);
}

// A pinned block found corrupt left the index but not the persisted pins, so the next block
// committed at that path came back pinned after a restart (store/indexed_store_blocks.cc).
TEST_CASE("Reliability regression: a pin does not outlive a block found corrupt") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = RelBlock(2);
  REQUIRE(client.Commit(id, SeededPayload(2, 5000)) == 0);
  REQUIRE(::setxattr(client.PathOf(id).c_str(), "user.gpucache.pinned", "1", 1, 0) == 0);
  DamagePayloadByte(m, id, 100);
  REQUIRE(ReadWhole(client.PathOf(id)).err == EIO);
  REQUIRE(WaitForMiss(client.PathOf(id)) == ENOENT);
  REQUIRE(client.Commit(id, SeededPayload(3, 5000)) == 0);  // recomputed, not pinned
  REQUIRE(m.Stop() == 0);
  m.Start();
  char v[4] = {};
  REQUIRE(::getxattr(client.PathOf(id).c_str(), "user.gpucache.pinned", v, sizeof v) == 1);
  CHECK(v[0] == '0');
  CHECK(ControlJson(m, "{\"op\":\"evict\",\"path\":\"" + AddressOf(id).RelativePath() + "\"}")
            .value("ok", false));
}

}  // namespace
}  // namespace gpucache
