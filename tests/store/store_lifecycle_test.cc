// The store's lifecycle moves, on both media: every path a block or reservation takes goes
// through Transition, and none of them is refused (store/lifecycle.h counts refusals).
#include <doctest/doctest.h>

#include "store/file_store.h"
#include "store/memory_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/store_factories.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

using test::FileFactory;
using test::MemoryFactory;

// The identity of block `n` of a chain of its own (distinct addresses).
CacheIdentity Numbered(uint8_t n) {
  CacheIdentity id = SampleIdentity();
  id.chain[1] = test::Hash(static_cast<uint8_t>(100 + n));
  return id;
}

Result<ReservationId> Reserved(IndexedStore& s, const CacheIdentity& id) {
  BlockAddress a = AddressOf(id);
  StatusCode ns = s.CreateNamespace(a.tenant, a.ns, kOwner);
  REQUIRE((ns == StatusCode::kOk || ns == StatusCode::kExists));
  auto r = s.Reserve(a, kOwner);
  if (r.ok()) REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
  return r;
}

StatusCode Commit(IndexedStore& s, const CacheIdentity& id, size_t bytes = 4096) {
  auto r = Reserved(s, id);
  if (!r.ok()) return r.status();
  REQUIRE(s.Write(r.value(), 0, Payload(bytes)).ok());
  return s.Commit(r.value());
}

TEST_CASE_TEMPLATE("Lifecycle: every path through the store takes only edges of the table", F,
                   MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  const uint64_t refused = RefusedTransitions();

  // Committed, opened, evicted while open (EVICTING -> QUARANTINED), drained, reclaimed.
  REQUIRE(Commit(*s, Numbered(1)) == StatusCode::kOk);
  {
    auto reader = s->Open(AddressOf(Numbered(1)));
    REQUIRE(reader.ok());
    REQUIRE(s->Evict(AddressOf(Numbered(1))) == StatusCode::kOk);
    std::vector<QuarantineInfo> q = s->ListQuarantine();
    REQUIRE(q.size() == 1);
    CHECK(s->ReclaimDrained(q[0].region_id) == StatusCode::kBusy);
  }
  REQUIRE(s->ReclaimDrained(s->ListQuarantine().at(0).region_id) == StatusCode::kOk);

  // Committed and invalidated with nobody reading (EVICTING -> ABSENT).
  REQUIRE(Commit(*s, Numbered(2)) == StatusCode::kOk);
  REQUIRE(s->Invalidate(AddressOf(Numbered(2))) == StatusCode::kOk);

  // Aborted before any write (RESERVED -> ABSENT) and after one (WRITING -> ABSENT).
  auto r = Reserved(*s, Numbered(3));
  REQUIRE(r.ok());
  CHECK(s->StatReservation(r.value())->state == BlockState::kReserved);
  REQUIRE(s->Abort(r.value()) == StatusCode::kOk);
  r = Reserved(*s, Numbered(3));
  REQUIRE(s->Write(r.value(), 0, Payload(10)).ok());
  REQUIRE(s->Abort(r.value()) == StatusCode::kOk);

  // Fenced while a writer holds it, evicted while open and reclaimed by the fence.
  REQUIRE(Commit(*s, Numbered(4)) == StatusCode::kOk);
  auto reader = s->Open(AddressOf(Numbered(4)));
  REQUIRE(reader.ok());
  REQUIRE(s->Evict(AddressOf(Numbered(4))) == StatusCode::kOk);
  r = Reserved(*s, Numbered(5));
  REQUIRE(s->OpenWriter(r.value()) == StatusCode::kOk);
  Result<uint64_t> epoch = s->Fence();
  REQUIRE(epoch.ok());
  CHECK(s->Write(r.value(), 0, Payload(10)).status() == StatusCode::kFenced);
  s->CloseWriter(r.value());
  CHECK(s->ReclaimFenced(epoch.value()).value() == 1);

  // Expired past its lease.
  r = Reserved(*s, Numbered(6));
  REQUIRE(s->Write(r.value(), 0, Payload(10)).ok());
  CHECK(s->ExpireReservations(UINT64_MAX / 2) == 1);

  CHECK(RefusedTransitions() == refused);
}

// A `.part` sized by truncate alone, never written, is a payload of zeros a fill may commit
// (fallocate-style). It used to commit straight from RESERVED, an edge the table lacks.
TEST_CASE_TEMPLATE("Lifecycle: a payload sized by truncate alone commits through WRITING", F,
                   MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  const uint64_t refused = RefusedTransitions();
  auto r = Reserved(*s, Numbered(1));
  REQUIRE(r.ok());
  REQUIRE(s->Truncate(r.value(), 4096) == StatusCode::kOk);
  CHECK(s->StatReservation(r.value())->state == BlockState::kWriting);
  REQUIRE(s->Commit(r.value()) == StatusCode::kOk);
  auto info = s->StatAttributes(AddressOf(Numbered(1)));
  REQUIRE(info.ok());
  CHECK(info->state == BlockState::kCommitted);
  CHECK(info->size == 4096);
  CHECK(RefusedTransitions() == refused);
}

}  // namespace
}  // namespace gpucache
