#include "store/io/registered_pool.h"

#include <doctest/doctest.h>

#include <set>
#include <thread>

namespace gpucache {
namespace {

std::unique_ptr<RegisteredPool> Pool(size_t slots) {
  auto p = RegisteredPool::Create({slots, 4096});
  REQUIRE(p);
  return p;
}

std::vector<SlotLease> Take(RegisteredPool& p, size_t n, LeaseInfo info = {}) {
  auto r = p.Checkout(n, info);
  REQUIRE(r.ok());
  return r.value();
}

TEST_CASE("RegisteredPool: buffers are 4096-aligned and distinct") {
  auto p = Pool(4);
  std::set<uint8_t*> seen;
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(reinterpret_cast<uintptr_t>(p->Buffer(i).data()) % kIoAlignment == 0);
    CHECK(p->Buffer(i).size() == 4096);
    seen.insert(p->Buffer(i).data());
  }
  CHECK(seen.size() == 4);
  CHECK(p->Iovecs().size() == 4);
  CHECK_FALSE(RegisteredPool::Create({0, 4096}));
  CHECK_FALSE(RegisteredPool::Create({4, 1000}));
}

TEST_CASE("RegisteredPool: checkout prefers bound slots then unbound ones") {
  auto p = Pool(4);
  p->Bind(2, true);
  p->Bind(3, true);
  auto a = Take(*p, 3);
  CHECK(a[0].bound);
  CHECK(a[1].bound);
  CHECK_FALSE(a[2].bound);
  std::set<uint32_t> first_two{a[0].slot, a[1].slot};
  CHECK(first_two == std::set<uint32_t>{2, 3});
  CHECK(p->Counters().bound == 2);
}

TEST_CASE("RegisteredPool: a batch that cannot be fully satisfied changes nothing") {
  auto p = Pool(3);
  auto a = Take(*p, 2);
  PoolCounters before = p->Counters();
  auto r = p->Checkout(2, {});
  CHECK(r.status() == StatusCode::kExhausted);
  PoolCounters after = p->Counters();
  CHECK(after.free == 1);
  CHECK(after.checked_out == 2);
  CHECK(after.checkouts == before.checkouts);
  CHECK(after.refused_batches == before.refused_batches + 1);
  CHECK(Take(*p, 1).size() == 1);  // the one free slot is still there
}

TEST_CASE("RegisteredPool: release after a known completion returns the slot") {
  auto p = Pool(1);
  auto a = Take(*p, 1);
  CHECK(p->Counters().free == 0);
  CHECK(p->Release(a[0]) == StatusCode::kOk);
  CHECK(p->Counters().free == 1);
  CHECK(p->Counters().releases == 1);
}

TEST_CASE("RegisteredPool: releasing a stale lease is refused") {
  auto p = Pool(1);
  auto a = Take(*p, 1);
  REQUIRE(p->Release(a[0]) == StatusCode::kOk);
  auto b = Take(*p, 1);
  CHECK(b[0].slot == a[0].slot);
  CHECK(b[0].id != a[0].id);
  // The old lease names the same slot but an older generation: it must not free b's slot.
  CHECK(p->Release(a[0]) == StatusCode::kInvalidArgument);
  CHECK(p->MarkUnknown(a[0]) == StatusCode::kInvalidArgument);
  CHECK(p->Counters().checked_out == 1);
  CHECK(p->Counters().stale_refused == 2);
  CHECK(p->Release(SlotLease{0, 0, false}) == StatusCode::kInvalidArgument);
  CHECK(p->Release(SlotLease{99, b[0].id, false}) == StatusCode::kInvalidArgument);
}

TEST_CASE("RegisteredPool: lease ids are monotonic and never recycled") {
  auto p = Pool(2);
  std::set<uint64_t> ids;
  uint64_t last = 0;
  for (int i = 0; i < 100; ++i) {
    auto a = Take(*p, 2);
    for (const SlotLease& l : a) {
      CHECK(l.id > last);
      last = l.id;
      CHECK(ids.insert(l.id).second);
      REQUIRE(p->Release(l) == StatusCode::kOk);
    }
  }
}

TEST_CASE("RegisteredPool: an unknown completion quarantines the slot") {
  auto p = Pool(2);
  auto a = Take(*p, 2);
  CHECK(p->MarkUnknown(a[0]) == StatusCode::kOk);
  CHECK(p->Release(a[0]) == StatusCode::kInvalidArgument);  // no longer a checkout
  CHECK(p->Release(a[1]) == StatusCode::kOk);
  PoolCounters c = p->Counters();
  CHECK(c.quarantined == 1);
  CHECK(c.free == 1);
  CHECK(p->Checkout(2, {}).status() == StatusCode::kExhausted);  // never handed out again
  auto b = Take(*p, 1);
  CHECK(b[0].slot == a[1].slot);
}

TEST_CASE("RegisteredPool: lease expiry frees neither a checked-out nor a quarantined slot") {
  auto p = Pool(3);
  auto a = Take(*p, 1, {7, 100});  // expires at t=100
  auto q = Take(*p, 1, {7, 100});
  auto keep = Take(*p, 1, {7, 0});  // never expires
  REQUIRE(p->MarkUnknown(q[0]) == StatusCode::kOk);
  CHECK(p->ExpireLeases(50) == 0);
  CHECK(p->Counters().checked_out == 2);
  CHECK(p->ExpireLeases(1000) == 1);  // a[0]: quarantined, not freed
  PoolCounters c = p->Counters();
  CHECK(c.free == 0);
  CHECK(c.quarantined == 2);
  CHECK(c.checked_out == 1);
  CHECK(c.expired == 1);
  CHECK(p->Checkout(1, {}).status() == StatusCode::kExhausted);
  CHECK(p->Release(a[0]) == StatusCode::kInvalidArgument);  // the expired lease is stale
}

TEST_CASE("RegisteredPool: fence then reclaim frees slots quarantined before the fence") {
  auto p = Pool(3);
  auto a = Take(*p, 2);
  REQUIRE(p->MarkUnknown(a[0]) == StatusCode::kOk);
  REQUIRE(p->Release(a[1]) == StatusCode::kOk);
  uint64_t e0 = p->epoch();
  CHECK(p->ReclaimFenced(e0).value() == 0);  // no fence yet: nothing is reclaimable
  auto fenced = p->FenceEpoch();
  REQUIRE(fenced.ok());
  CHECK(fenced.value() == e0 + 1);
  // Quarantined after the fence: not covered by it.
  auto b = Take(*p, 1);
  REQUIRE(p->MarkUnknown(b[0]) == StatusCode::kOk);
  auto n = p->ReclaimFenced(fenced.value());
  REQUIRE(n.ok());
  CHECK(n.value() == 1);
  PoolCounters c = p->Counters();
  CHECK(c.quarantined == 1);
  CHECK(c.free == 2);
  CHECK(c.reclaimed == 1);
}

TEST_CASE("RegisteredPool: reclaim with a stale or future epoch is refused") {
  auto p = Pool(2);
  auto a = Take(*p, 1);
  REQUIRE(p->MarkUnknown(a[0]) == StatusCode::kOk);
  uint64_t e1 = p->FenceEpoch().value();
  uint64_t e2 = p->FenceEpoch().value();
  CHECK(e2 == e1 + 1);
  CHECK(p->ReclaimFenced(e1).status() == StatusCode::kFenced);
  CHECK(p->ReclaimFenced(e2 + 1).status() == StatusCode::kInvalidArgument);
  CHECK(p->Counters().quarantined == 1);
  CHECK(p->ReclaimFenced(e2).value() == 1);
}

TEST_CASE("RegisteredPool: a fence revokes checkouts and reclaim frees them") {
  auto p = Pool(2);
  auto a = Take(*p, 2);
  uint64_t e = p->FenceEpoch().value();
  PoolCounters c = p->Counters();
  CHECK(c.checked_out == 0);
  CHECK(c.quarantined == 2);
  CHECK(p->Release(a[0]) == StatusCode::kInvalidArgument);  // revoked
  CHECK(p->ReclaimFenced(e).value() == 2);
  CHECK(p->Counters().free == 2);
}

TEST_CASE("RegisteredPool: if the epoch cannot advance checked-out slots stay checked out") {
  auto p = Pool(3);
  auto a = Take(*p, 2);
  REQUIRE(p->MarkUnknown(a[1]) == StatusCode::kOk);
  uint64_t e = p->epoch();
  p->TEST_BlockEpoch(true);
  CHECK(p->FenceEpoch().status() == StatusCode::kBusy);
  CHECK(p->epoch() == e);
  CHECK(p->ReclaimFenced(e).value() == 0);  // the quarantine is from this very epoch
  PoolCounters c = p->Counters();
  CHECK(c.checked_out == 1);
  CHECK(c.quarantined == 1);
  CHECK(p->Release(a[0]) == StatusCode::kOk);  // its lease is still good
  p->TEST_BlockEpoch(false);
  CHECK(p->FenceEpoch().ok());
}

TEST_CASE("RegisteredPool: a drained attestation returns a quarantined slot") {
  auto p = Pool(1);
  auto a = Take(*p, 1);
  CHECK(p->AttestDrained(a[0]) == StatusCode::kInvalidArgument);  // not quarantined
  REQUIRE(p->MarkUnknown(a[0]) == StatusCode::kOk);
  CHECK(p->AttestDrained(a[0]) == StatusCode::kOk);
  CHECK(p->Counters().free == 1);
  CHECK(p->Counters().attested == 1);
  CHECK(p->AttestDrained(a[0]) == StatusCode::kInvalidArgument);  // once
  // A late attestation for a retired lease cannot free the slot's next user.
  auto b = Take(*p, 1);
  REQUIRE(p->MarkUnknown(b[0]) == StatusCode::kOk);
  CHECK(p->AttestDrained(a[0]) == StatusCode::kInvalidArgument);
  CHECK(p->Counters().quarantined == 1);
}

TEST_CASE("RegisteredPool: concurrent checkouts and releases keep the counters whole") {
  auto p = Pool(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&p, t] {
      for (int i = 0; i < 2000; ++i) {
        auto r = p->Checkout(1 + (i + t) % 3, {uint64_t(t), 0});
        if (!r.ok()) continue;
        for (const SlotLease& l : r.value()) {
          if (p->Release(l) != StatusCode::kOk) std::abort();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  PoolCounters c = p->Counters();
  CHECK(c.free == 8);
  CHECK(c.checked_out == 0);
  CHECK(c.checkouts == c.releases);
}

}  // namespace
}  // namespace gpucache
