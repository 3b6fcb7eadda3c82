// Blocks the engine invalidates (an unlink: "this block is wrong") and their cold copies
// (ColdTier::OnInvalidated, docs/cold-tier.md "Invalidated blocks"). Review (2026-12-07): the
// tier never heard of invalidations, so a refill after the block's eviction brought the bytes
// the engine had invalidated back, and under manual write-back a block committed again with
// other bytes was taken for cold by every `cold pack` (its old locator) and never packed again.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "cold/locator.h"
#include "tests/cold/sink_test_util.h"
#include "tests/cold/tier_fixture.h"

namespace gpucache::cold {
using namespace testing;

namespace {

// A tier that hears the hot store's invalidations, as the daemon wires it.
struct Invalidating : TierFixture {
  Invalidating() {
    hot.SetInvalidationObserver(
        [this](const BlockAddress& a, const std::string& checksum) { tier->OnInvalidated(a, checksum); });
  }
  BlockAddress Address(int i) const { return AddressOf(NthIdentity(i)); }
  void Pack() {
    nlohmann::json r = Ctl(kAdmin, {{"op", "cold.pack"}});
    CAPTURE(r.dump());
    REQUIRE(r["complete"] == true);
  }
  Bytes Read(int i) {
    auto reader = hot.Open(Address(i));
    REQUIRE(reader.ok());
    Bytes got(reader.value()->info().size);
    REQUIRE(reader.value()->Read(0, got).ok());
    return got;
  }
  bool HasLocator(int i) { return s3.Objects().count(LocatorKey(kPrefix, Address(i))) == 1; }
  void Recommit(int i, int payload) {
    REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(payload, 1000)) == StatusCode::kOk);
  }
};

}  // namespace

TEST_CASE("Cold invalidation: the bytes the engine invalidated never come back through a refill") {
  Invalidating f;
  f.Commit(0);
  f.Pack();
  REQUIRE(f.Refill(0)["result"] == "already-hot");
  REQUIRE(f.hot.Invalidate(f.Address(0)) == StatusCode::kOk);
  // Before any round: refused, though the locator (and this node's known place) still name them.
  nlohmann::json r = f.Refill(0);
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "invalidated");
  CHECK_FALSE(f.hot.Stat(f.Address(0)).ok());
  CHECK(f.tier->Stats().invalidations_pending == 1);
  CHECK(f.tier->Stats().refill_missing_by_reason[static_cast<size_t>(MissingReason::kInvalidated)] == 1);
  // The round withdraws the locator; then the block is simply not in the cold tier.
  f.tier->WithdrawInvalidated();
  CHECK_FALSE(f.HasLocator(0));
  CHECK(f.tier->Stats().invalidations_pending == 0);
  CHECK(f.tier->Stats().locators_withdrawn == 1);
  r = f.Refill(0);
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "absent");
}

TEST_CASE("Cold invalidation: a block committed again with other bytes is packed again and refills them") {
  Invalidating f;  // manual write-back: only `cold pack` packs
  f.Commit(0);
  f.Pack();
  REQUIRE(f.hot.Invalidate(f.Address(0)) == StatusCode::kOk);
  f.Recommit(0, 7);
  nlohmann::json pack = f.Ctl(kAdmin, {{"op", "cold.pack"}});
  CHECK(pack["skipped_cold"] == 0);  // before: 1, the old locator taken for a cold copy
  CHECK(pack["blocks"] == 1);
  REQUIRE(f.hot.Evict(f.Address(0)) == StatusCode::kOk);
  REQUIRE(f.Refill(0)["result"] == "hit");
  CHECK(f.Read(0) == PayloadOf(7, 1000));  // before: PayloadOf(0), the bytes invalidated
}

TEST_CASE("Cold invalidation: the same bytes committed again keep their locator") {
  Invalidating f;
  f.Commit(0);
  f.Pack();
  REQUIRE(f.hot.Invalidate(f.Address(0)) == StatusCode::kOk);
  f.Recommit(0, 0);
  f.tier->WithdrawInvalidated();
  CHECK(f.HasLocator(0));
  CHECK(f.tier->Stats().invalidations_pending == 0);
  REQUIRE(f.hot.Evict(f.Address(0)) == StatusCode::kOk);
  REQUIRE(f.Refill(0)["result"] == "hit");
  CHECK(f.Read(0) == PayloadOf(0, 1000));
}

TEST_CASE("Cold invalidation: a delete the object store refuses is tried again, and refills stay refused") {
  Invalidating f;
  f.Commit(0);
  f.Pack();
  const std::string locator = LocatorKey(kPrefix, f.Address(0));
  bool refuse = true;
  f.s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "DELETE" && q.key == locator && refuse) return Temporary();
    return std::nullopt;
  });
  REQUIRE(f.hot.Invalidate(f.Address(0)) == StatusCode::kOk);
  f.tier->WithdrawInvalidated();
  CHECK(f.HasLocator(0));
  CHECK(f.tier->Stats().invalidations_pending == 1);
  CHECK(f.Refill(0)["reason"] == "invalidated");
  refuse = false;
  f.tier->WithdrawInvalidated();
  CHECK_FALSE(f.HasLocator(0));
  CHECK(f.tier->Stats().invalidations_pending == 0);
}

TEST_CASE("Cold invalidation: a newer locator naming other bytes is never withdrawn") {
  Invalidating f;
  f.Commit(0);
  f.Pack();
  REQUIRE(f.hot.Invalidate(f.Address(0)) == StatusCode::kOk);
  // Another node packs new bytes of the block (after their commit) before this node's round.
  {
    MemoryStore other_hot;
    ColdTierOptions o = OneBlockPacks();
    o.write_back = WriteBack::kAfterCommit;
    ColdTier other(other_hot, f.s3, o, TestKeys());
    other_hot.SetCommitObserver([&](const BlockAddress& a) { other.OnCommitted(a); });
    REQUIRE(CommitBlock(other_hot, NthIdentity(0), PayloadOf(9, 1000)) == StatusCode::kOk);
    other.PackQueued();
    REQUIRE(other.DrainNow().uploaded == 1);
  }
  f.tier->WithdrawInvalidated();
  REQUIRE(f.HasLocator(0));
  CHECK(f.tier->Stats().invalidations_pending == 0);
  CHECK(f.tier->Stats().locators_withdrawn == 0);
  nlohmann::json r = f.Refill(0);
  REQUIRE(r["result"] == "hit");
  CHECK(f.Read(0) == PayloadOf(9, 1000));
}

// Review of the change (2026-12-07): a round that found no locator dropped the entry while the
// sink still held the block's job (a backoff, the failed queue); the job's locator then went up
// and a refill served the invalidated bytes.
TEST_CASE("Cold invalidation: a block whose upload job is still held stays refused until the job is gone") {
  Invalidating f;
  f.Commit(0);
  const std::string locator = LocatorKey(kPrefix, f.Address(0));
  bool refuse = true;
  f.s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "PUT" && q.key == locator && refuse) return Permanent();
    return std::nullopt;
  });
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == false);
  std::vector<FailedJob> failed = f.tier->sink().Failed();
  REQUIRE(failed.size() == 1);
  REQUIRE(f.hot.Invalidate(f.Address(0)) == StatusCode::kOk);
  f.tier->WithdrawInvalidated();
  CHECK(f.tier->Stats().invalidations_pending == 1);  // before: 0, the entry dropped
  refuse = false;
  REQUIRE(f.tier->sink().Retry(failed[0].id));
  REQUIRE(f.tier->DrainNow().uploaded == 1);
  REQUIRE(f.HasLocator(0));
  nlohmann::json r = f.Refill(0);
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "invalidated");
  f.tier->WithdrawInvalidated();  // the job is gone: now the locator goes
  CHECK_FALSE(f.HasLocator(0));
  CHECK(f.tier->Stats().invalidations_pending == 0);
  CHECK(f.Refill(0)["reason"] == "absent");
}

}  // namespace gpucache::cold
