// QuarantineSet alone: entries, reader counts, and the two ways out (drained, fenced).
#include "store/quarantine_set.h"

#include <doctest/doctest.h>

#include "tests/store/store_parts_test.h"

namespace gpucache {
namespace {

using test::BlockNo;

QuarantineSet::Entry Leaving(unsigned n, uint64_t region, int readers, uint64_t since_epoch) {
  QuarantineSet::Entry e;
  e.info.address = BlockNo("acme", n);
  e.info.region_id = region;
  e.info.size = 100 * n;
  e.info.state = BlockState::kEvicting;
  e.open_readers = readers;
  e.reason = "evicted";
  e.since_epoch = since_epoch;
  return e;
}

TEST_CASE("QuarantineSet: a leaving block enters as QUARANTINED, listed and found by address") {
  QuarantineSet q;
  REQUIRE(q.Add(Leaving(1, 7, 1, 3)));
  CHECK(q.size() == 1);
  CHECK(q.HoldsAddress(BlockNo("acme", 1)));
  CHECK_FALSE(q.HoldsAddress(BlockNo("acme", 2)));
  std::optional<QuarantineInfo> info = q.Stat(7);
  REQUIRE(info);
  CHECK(info->address == BlockNo("acme", 1));
  CHECK(info->size == 100);
  CHECK(info->open_handles == 1);
  CHECK(info->since_epoch == 3);
  CHECK(info->reason == "evicted");
  CHECK(q.List().size() == 1);
  CHECK_FALSE(q.Stat(8));
}

TEST_CASE("QuarantineSet: refuses a block that is not leaving, and a region twice") {
  QuarantineSet q;
  QuarantineSet::Entry committed = Leaving(1, 7, 0, 1);
  committed.info.state = BlockState::kCommitted;  // COMMITTED -> QUARANTINED is not an edge
  uint64_t refused = RefusedTransitions();
  CHECK_FALSE(q.Add(committed));
  CHECK(RefusedTransitions() == refused + 1);
  CHECK(q.size() == 0);
  REQUIRE(q.Add(Leaving(1, 7, 0, 1)));
  CHECK_FALSE(q.Add(Leaving(2, 7, 0, 1)));
  CHECK(q.Stat(7)->address == BlockNo("acme", 1));
}

TEST_CASE("QuarantineSet: a drained attestation waits for this process's readers, not a timeout") {
  QuarantineSet q;
  REQUIRE(q.Add(Leaving(1, 7, 2, 1)));
  QuarantineSet::Entry out;
  CHECK(q.TakeDrained(7, out) == StatusCode::kBusy);
  q.ReaderClosed(7);
  CHECK(q.TakeDrained(7, out) == StatusCode::kBusy);
  q.ReaderClosed(7);
  CHECK(q.size() == 1);  // the last close does not free it
  q.ReaderClosed(7);     // one close too many changes nothing
  CHECK(q.Stat(7)->open_handles == 0);
  REQUIRE(q.TakeDrained(7, out) == StatusCode::kOk);
  CHECK(out.info.state == BlockState::kAbsent);
  CHECK(out.info.address == BlockNo("acme", 1));
  CHECK(q.size() == 0);
  CHECK(q.TakeDrained(7, out) == StatusCode::kNotFound);
}

TEST_CASE("QuarantineSet: a fenced reclaim takes only what entered before that fence") {
  QuarantineSet q;
  REQUIRE(q.Add(Leaving(1, 10, 1, 1)));
  REQUIRE(q.Add(Leaving(2, 11, 0, 2)));
  REQUIRE(q.Add(Leaving(3, 12, 0, 3)));
  std::vector<QuarantineSet::Entry> freed = q.TakeBefore(3);
  REQUIRE(freed.size() == 2);  // open readers do not hold back a fenced reclaim
  CHECK(freed[0].info.region_id == 10);
  CHECK(freed[1].info.region_id == 11);
  for (const auto& e : freed) CHECK(e.info.state == BlockState::kAbsent);
  CHECK(q.size() == 1);
  CHECK(q.Stat(12));
}

}  // namespace
}  // namespace gpucache
