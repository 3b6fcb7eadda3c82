// Damage found by a start (eager, or by the walk and first uses of a verify-later start,
// adr/0016): counted once as its tenant's checksum failure, set aside, and its pin gone with it.
#include <doctest/doctest.h>

#include <cstdio>
#include <latch>
#include <set>

#include "tests/store/verify_after_start_util.h"

namespace gpucache {
namespace {

using namespace verify_test;

uint64_t ChecksumFailures(IndexedStore& s) { return s.Stats().tenants["acme"].checksum_failures; }

// Damages a byte of the header of a block file in place, as a failing device would.
void DamageHeader(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r+b");
  REQUIRE(f);
  std::fseek(f, 40, SEEK_SET);
  std::fputc('X', f);
  std::fclose(f);
}

// Regression: damage a start found was never counted, so gpucache_checksum_failures_total and
// its alert stayed silent for it; only damage a read found was counted.
TEST_CASE("Verify after start: damage found at start is counted once as a checksum failure, eager or walked") {
  for (bool clean : {true, false}) {
    CAPTURE(clean);
    test::TempDir eager_dir, eager_other, lazy_dir, lazy_other;
    MakeDamagedStart(eager_dir.path(), eager_other.path(), clean);
    MakeDamagedStart(lazy_dir.path(), lazy_other.path(), clean);
    // Blocks 1, 2 and 4 are damaged; the file with no block's name is not a block's failure.
    auto eager = Open(eager_dir.path(), {});
    CHECK(ChecksumFailures(*eager) == 3);
    std::latch release(1);
    auto lazy = Open(lazy_dir.path(), HeldWalk(release));
    CHECK(ChecksumFailures(*lazy) == 0);  // nothing checked yet
    release.count_down();
    lazy->WaitForVerification();
    CHECK(ChecksumFailures(*lazy) == 3);
    // Set aside: the next start does not count them again.
    eager.reset();
    lazy.reset();
    CHECK(ChecksumFailures(*Open(eager_dir.path(), {})) == 0);
    CHECK(ChecksumFailures(*Open(lazy_dir.path(), {})) == 0);
  }
}

TEST_CASE("Verify after start: damage a first use finds is counted once, not again by the walk") {
  test::TempDir tmp;
  {
    auto s = Open(tmp.path(), {});
    for (int k = 0; k < 3; k++) Commit(*s, k, PayloadOf(k));
  }
  DamageHeader(PathOf(tmp.path(), 1));
  std::latch release(1);
  auto s = Open(tmp.path(), HeldWalk(release));
  CHECK(ChecksumFailures(*s) == 0);
  CHECK_FALSE(s->Open(AddressOf(Key(1))).ok());
  CHECK(ChecksumFailures(*s) == 1);
  CHECK_FALSE(s->Stat(AddressOf(Key(1))).ok());  // gone: asked again, not counted again
  release.count_down();
  s->WaitForVerification();
  CHECK(ChecksumFailures(*s) == 1);
  CHECK(ReadAll(*s, 0) == PayloadOf(0));
}

// Regression (review of stop 45's diff): a pinned block a verify-later start found damaged left
// its pin in PINS, so a block committed at its path later came back pinned after a restart.
TEST_CASE("Verify after start: a damaged pinned block takes its pin with it") {
  test::TempDir tmp;
  {
    auto s = Open(tmp.path(), {});
    Commit(*s, 1, PayloadOf(1));
    REQUIRE(s->SetPinned(AddressOf(Key(1)), true) == StatusCode::kOk);
  }
  DamageHeader(PathOf(tmp.path(), 1));
  {
    std::latch release(1);
    auto s = Open(tmp.path(), HeldWalk(release));
    CHECK_FALSE(s->Open(AddressOf(Key(1))).ok());  // its first use finds the damage
    release.count_down();
    s->WaitForVerification();
    Commit(*s, 1, OtherPayloadOf(1));  // a new block at the same path, never pinned
  }
  auto s = Open(tmp.path(), {});
  CHECK(s->Evict(AddressOf(Key(1))) == StatusCode::kOk);  // not pinned: evictable
}

TEST_CASE("Verify after start: a damaged file no entry names is counted when the walk finds it") {
  test::TempDir tmp, other;
  {
    auto s = Open(tmp.path(), {});
    Commit(*s, 0, PayloadOf(0));
    auto o = Open(other.path(), {});
    Commit(*o, 1, PayloadOf(1));
  }
  fs::copy_file(PathOf(other.path(), 1), PathOf(tmp.path(), 1));  // INDEX does not name it
  DamageHeader(PathOf(tmp.path(), 1));
  StoreOptions o;
  o.verify_in_background = true;
  auto s = Open(tmp.path(), o);
  s->WaitForVerification();
  CHECK(DamagedBlocks(tmp.path()) == std::set<std::string>{AddressOf(Key(1)).block});
  CHECK(ChecksumFailures(*s) == 1);
}

TEST_CASE("Verify after start: an undamaged start counts no checksum failure") {
  test::TempDir tmp;
  {
    auto s = Open(tmp.path(), {});
    for (int k = 0; k < 3; k++) Commit(*s, k, PayloadOf(k));
  }
  for (bool background : {false, true}) {
    CAPTURE(background);
    StoreOptions o;
    o.verify_in_background = background;
    auto s = Open(tmp.path(), o);
    s->WaitForVerification();
    for (int k = 0; k < 3; k++) CHECK(ReadAll(*s, k) == PayloadOf(k));
    CHECK(ChecksumFailures(*s) == 0);
  }
}

}  // namespace
}  // namespace gpucache
