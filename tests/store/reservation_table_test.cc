// ReservationTable alone: the single-flight claim, outcomes, fencing and leases.
#include "store/reservation_table.h"

#include <doctest/doctest.h>

#include "tests/store/store_parts_test.h"

namespace gpucache {
namespace {

using test::BlockNo;

const Owner kOwner{1000, 1000};
constexpr uint64_t kLease = 1000;

TEST_CASE("ReservationTable: a reservation claims its address, RESERVED, its fill pending") {
  ReservationTable t;
  auto& r = t.Add(BlockNo("acme", 1), kOwner, 5, 100);
  ReservationId id = r.info.id;
  CHECK(r.info.state == BlockState::kReserved);
  CHECK(r.info.epoch == 5);
  CHECK((r.info.region_id >> 32) == 5);
  CHECK(t.Holder(BlockNo("acme", 1)) == id);
  CHECK_FALSE(t.Holder(BlockNo("acme", 2)));
  CHECK(t.Outcome(BlockNo("acme", 1)) == FillState::kPending);
  CHECK(t.AnyIn("acme", "ns"));
  CHECK_FALSE(t.AnyIn("acme", "other"));
  CHECK_FALSE(t.AnyIn("globex", "ns"));
  CHECK(t.PartNamesIn("acme", "ns") == std::vector<std::string>{BlockNo("acme", 1).block + ".part"});
  auto& second = t.Add(BlockNo("acme", 2), kOwner, 5, 100);
  CHECK(second.info.id != id);
  CHECK(second.info.region_id != r.info.region_id);
}

TEST_CASE("ReservationTable: ending a reservation frees the address and records the outcome") {
  ReservationTable t;
  ReservationId id = t.Add(BlockNo("acme", 1), kOwner, 1, 100).info.id;
  REQUIRE(Transition(t.Find(id)->info.state, BlockState::kWriting));
  t.End(id, FillState::kFinished, BlockState::kCommitted);
  CHECK_FALSE(t.Find(id));
  CHECK_FALSE(t.Holder(BlockNo("acme", 1)));
  CHECK(t.Outcome(BlockNo("acme", 1)) == FillState::kFinished);

#ifdef NDEBUG
  // RESERVED -> COMMITTED is not an edge: the refusal is counted (a bug in the caller). A build
  // with assertions stops there instead (MustTransition), so this half runs in release only.
  ReservationId other = t.Add(BlockNo("acme", 2), kOwner, 1, 100).info.id;
  uint64_t refused = RefusedTransitions();
  t.End(other, FillState::kFinished, BlockState::kCommitted);
  CHECK(RefusedTransitions() == refused + 1);
#endif
}

TEST_CASE("ReservationTable: a fence releases every reservation, idle ones go, busy ones wait") {
  ReservationTable t;
  ReservationId idle = t.Add(BlockNo("acme", 1), kOwner, 1, 100).info.id;
  ReservationId busy = t.Add(BlockNo("acme", 2), kOwner, 1, 100).info.id;
  t.Find(idle)->payload = std::make_shared<PendingPayload>();
  t.Find(busy)->writers = 1;
  std::vector<ReservationId> released;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  t.FenceAll(300, [&](const ReservationTable::Reservation& r) { released.push_back(r.info.id); },
             discard);
  CHECK(released == std::vector<ReservationId>{idle, busy});
  CHECK(discard.size() == 1);
  CHECK_FALSE(t.Find(idle));
  REQUIRE(t.Find(busy));
  CHECK(t.Find(busy)->fenced);
  CHECK(t.Find(busy)->info.state == BlockState::kAbsent);
  CHECK_FALSE(t.Holder(BlockNo("acme", 2)));  // a new fill of the address may start
  CHECK(t.Outcome(BlockNo("acme", 2)) == FillState::kFenced);
  CHECK(t.RecentlyFenced(BlockNo("acme", 2), 300 + kLease - 1, kLease));
  CHECK_FALSE(t.RecentlyFenced(BlockNo("acme", 2), 300 + kLease, kLease));
  CHECK_FALSE(t.RecentlyFenced(BlockNo("acme", 3), 300, kLease));

  // A second fence does not release it again; ending it later records nothing new.
  released.clear();
  t.FenceAll(400, [&](const ReservationTable::Reservation& r) { released.push_back(r.info.id); },
             discard);
  CHECK(released.empty());
  t.End(busy, FillState::kFailed, BlockState::kAbsent);
  CHECK_FALSE(t.Find(busy));
  CHECK(t.Outcome(BlockNo("acme", 2)) == FillState::kFenced);
}

TEST_CASE("ReservationTable: only idle reservations past their lease expire") {
  ReservationTable t;
  ReservationId old_idle = t.Add(BlockNo("acme", 1), kOwner, 1, 100).info.id;
  ReservationId old_open = t.Add(BlockNo("acme", 2), kOwner, 1, 100).info.id;
  ReservationId fresh = t.Add(BlockNo("acme", 3), kOwner, 1, 900).info.id;
  t.Find(old_open)->writers = 1;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  int released = 0;
  size_t n = t.ExpireIdle(100 + kLease + 1, kLease,
                          [&](const ReservationTable::Reservation&) { released++; }, discard);
  CHECK(n == 1);
  CHECK(released == 1);
  CHECK_FALSE(t.Find(old_idle));
  CHECK(t.Outcome(BlockNo("acme", 1)) == FillState::kFailed);
  CHECK(t.Find(old_open));
  CHECK(t.Find(fresh));
}

TEST_CASE("ReservationTable: a fenced reservation goes with the last call that held it") {
  ReservationTable t;
  ReservationId id = t.Add(BlockNo("acme", 1), kOwner, 1, 100).info.id;
  auto payload = std::make_shared<PendingPayload>();
  t.Find(id)->payload = payload;
  t.Find(id)->writers = 1;
  t.Find(id)->writes_inflight = 1;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  t.FenceAll(300, [](const ReservationTable::Reservation&) {}, discard);
  REQUIRE(t.Find(id));
  t.Find(id)->writers = 0;  // the writer closed; a write is still in flight
  CHECK(t.ForgetIfFencedIdle(id) == nullptr);
  CHECK(t.Find(id));
  t.Find(id)->writes_inflight = 0;  // ... and ended
  CHECK(t.ForgetIfFencedIdle(id) == payload);
  CHECK_FALSE(t.Find(id));

  // Not fenced: an idle reservation stays for its writer (or its lease).
  ReservationId live = t.Add(BlockNo("acme", 2), kOwner, 1, 100).info.id;
  CHECK(t.ForgetIfFencedIdle(live) == nullptr);
  CHECK(t.Find(live));
}

// Regression (review, 2026-12-06): the lease pass skipped fenced reservations, so one that no
// call forgot (a truncate by path, a commit whose seal failed) held its file forever.
TEST_CASE("ReservationTable: the lease pass forgets a fenced reservation left idle") {
  ReservationTable t;
  ReservationId id = t.Add(BlockNo("acme", 1), kOwner, 1, 100).info.id;
  t.Find(id)->payload = std::make_shared<PendingPayload>();
  t.Find(id)->writes_inflight = 1;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  t.FenceAll(300, [](const ReservationTable::Reservation&) {}, discard);
  REQUIRE(discard.empty());
  t.Find(id)->writes_inflight = 0;  // let go by a call that did not forget it
  int released = 0;
  size_t expired = t.ExpireIdle(300, kLease, [&](const ReservationTable::Reservation&) { released++; },
                                discard);
  CHECK_FALSE(t.Find(id));
  CHECK(discard.size() == 1);
  CHECK(expired == 0);   // not an expiry: the fence ended it
  CHECK(released == 0);  // its credits went at the fence
}

TEST_CASE("ReservationTable: remembered outcomes are bounded, the oldest forgotten first") {
  ReservationTable t;
  for (unsigned i = 0; i <= ReservationTable::kMaxOutcomes; ++i) {
    ReservationId id = t.Add(BlockNo("acme", i), kOwner, 1, 100).info.id;
    t.End(id, FillState::kFailed, BlockState::kAbsent);
  }
  CHECK_FALSE(t.Outcome(BlockNo("acme", 0)));
  CHECK(t.Outcome(BlockNo("acme", 1)) == FillState::kFailed);
  CHECK(t.Outcome(BlockNo("acme", ReservationTable::kMaxOutcomes)) == FillState::kFailed);
}

// Regression (review, 2026-12-06): a fence recorded its fenced outcomes in the bounded table at
// the queue position of the fill's Add, so 65,536 other fills within the lease (13 s at 5,000
// fills a second) made it forget the fence: the fenced writer's rename then heard ENOENT, not
// ESTALE, and a new fill could take the address within the lease.
TEST_CASE("ReservationTable: a fence is remembered for its lease, whatever number of fills follow") {
  ReservationTable t;
  ReservationId fenced = t.Add(BlockNo("acme", 0), kOwner, 1, 100).info.id;
  t.Find(fenced)->writers = 1;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  t.FenceAll(200, [](const ReservationTable::Reservation&) {}, discard);
  for (unsigned i = 1; i <= ReservationTable::kMaxOutcomes + 1; ++i) {
    ReservationId id = t.Add(BlockNo("acme", i), kOwner, 2, 300).info.id;
    t.End(id, FillState::kFinished, BlockState::kCommitted);
  }
  CHECK(t.RecentlyFenced(BlockNo("acme", 0), 400, kLease));
  CHECK(t.Outcome(BlockNo("acme", 0)) == FillState::kFenced);
  // A lease later the lease pass forgets it, and the address is an address like any other.
  t.ExpireIdle(200 + kLease, kLease, [](const ReservationTable::Reservation&) {}, discard);
  CHECK_FALSE(t.RecentlyFenced(BlockNo("acme", 0), 200 + kLease - 1, kLease));
}

// Regression (review, 2026-12-06): a fence released the address of a fill that was sealing, so
// a new fill of the same block could commit (acknowledged) before the fenced seal removed the
// file under the block's name, which was then the new block's.
TEST_CASE("ReservationTable: a fill fenced while sealing keeps its address claimed until forgotten") {
  ReservationTable t;
  const BlockAddress a = BlockNo("acme", 1);
  ReservationId sealing = t.Add(a, kOwner, 1, 100).info.id;
  t.Find(sealing)->sealing = true;
  std::vector<std::shared_ptr<PendingPayload>> discard;
  t.FenceAll(200, [](const ReservationTable::Reservation&) {}, discard);
  CHECK(t.Claimed(a));
  CHECK_FALSE(t.Holder(a));  // no writer, lookup or xattr finds the fenced fill
  CHECK(t.PartNamesIn(a.tenant, a.ns).empty());  // nor a listing (its lookup says ESTALE)
  t.Find(sealing)->sealing = false;
  t.ForgetFencedSeal(sealing);
  CHECK_FALSE(t.Claimed(a));
  CHECK_FALSE(t.Find(sealing));
}

}  // namespace
}  // namespace gpucache
