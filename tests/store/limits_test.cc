// ResourceLimits, eviction, quarantine, fencing, drain and leases, on the reference store.
#include <doctest/doctest.h>

#include <chrono>
#include <set>
#include <vector>
#include <thread>
#include <atomic>

#include "store/clock.h"
#include "store/eviction/eviction_policy.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

// A distinct block per (tenant, n): each its own parent, so none is another's prefix.
CacheIdentity Block(const std::string& tenant, uint8_t n) {
  CacheIdentity id = SampleIdentity(tenant, 16);  // a full block
  id.chain[0] = test::Hash(n);
  return id;
}

StatusCode Commit(IndexedStore& s, const CacheIdentity& id, size_t size) {
  BlockAddress a = AddressOf(id);
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  if (!r.ok()) return r.status();
  s.SetIdentity(r.value(), EncodePhysicalKey(id));
  auto w = s.Write(r.value(), 0, Payload(size));
  if (!w.ok()) {
    s.Abort(r.value());
    return w.status();
  }
  StatusCode c = s.Commit(r.value());
  if (c != StatusCode::kOk) s.Abort(r.value());
  return c;
}

bool Present(IndexedStore& s, const CacheIdentity& id) { return s.Stat(AddressOf(id)).ok(); }

StoreOptions WithTenantQuota(uint64_t bytes) {
  StoreOptions o;
  o.limits.tenants["acme"].max_retained_bytes = bytes;
  return o;
}

TEST_CASE("Limits: object size, tenant or global, is EFBIG") {
  StoreOptions o;
  o.limits.global.max_block_bytes = 10000;
  o.limits.tenants["acme"].max_block_bytes = 5000;
  MemoryStore s(o);
  CHECK(Commit(s, Block("acme", 1), 5001) == StatusCode::kTooLarge);
  CHECK(Commit(s, Block("acme", 2), 5000) == StatusCode::kOk);
  CHECK(Commit(s, Block("globex", 3), 10001) == StatusCode::kTooLarge);
  CHECK(Commit(s, Block("globex", 4), 10000) == StatusCode::kOk);
}

TEST_CASE("Limits: in-flight requests, bytes and registrations are EAGAIN and change nothing") {
  StoreOptions o;
  o.limits.tenants["acme"].max_inflight_requests = 1;
  o.limits.tenants["acme"].max_inflight_bytes = 1000;
  o.limits.global.max_registrations = 3;
  MemoryStore s(o);
  BlockAddress a1 = AddressOf(Block("acme", 1)), a2 = AddressOf(Block("acme", 2));
  REQUIRE(s.CreateNamespace("acme", a1.ns, kOwner) == StatusCode::kOk);
  auto r1 = s.Reserve(a1, kOwner);
  REQUIRE(r1.ok());
  CHECK(s.Reserve(a2, kOwner).status() == StatusCode::kExhausted);
  CHECK(s.FindReservation(a2) == std::nullopt);
  CHECK(s.Write(r1.value(), 0, Payload(1001)).status() == StatusCode::kExhausted);
  CHECK(s.StatReservation(r1.value())->size == 0);
  CHECK(s.Write(r1.value(), 0, Payload(1000)).ok());
  CHECK(s.Stats().tenants["acme"].usage.inflight_bytes == 1000);
  s.Abort(r1.value());
  CHECK(s.Stats().tenants["acme"].usage.inflight_bytes == 0);
  // Registrations count committed blocks too: with all three pinned, nothing can give one up.
  for (uint8_t n : {5, 6, 7}) {
    REQUIRE(Commit(s, Block("globex", n), 10) == StatusCode::kOk);
    s.SetPinned(AddressOf(Block("globex", n)), true);
  }
  CHECK(Commit(s, Block("globex", 8), 10) == StatusCode::kExhausted);
  for (uint8_t n : {5, 6, 7}) CHECK(Present(s, Block("globex", n)));
}

// Issue 13, defect 8: max_registrations never evicted, so once one tenant held them all every
// other tenant got EAGAIN forever.
TEST_CASE("Limits: registrations are reclaimed like bytes, fairly") {
  StoreOptions o;
  o.limits.global.max_registrations = 4;
  MemoryStore s(o);
  for (uint8_t n = 1; n <= 4; ++n) REQUIRE(Commit(s, Block("globex", n), 10) == StatusCode::kOk);
  // acme takes globex's oldest block's registration: globex is above its share (2 of 4).
  REQUIRE(Commit(s, Block("acme", 10), 10) == StatusCode::kOk);
  CHECK_FALSE(Present(s, Block("globex", 1)));
  REQUIRE(Commit(s, Block("acme", 11), 10) == StatusCode::kOk);
  CHECK_FALSE(Present(s, Block("globex", 2)));
  // globex is at its share now: acme's third evicts acme's own oldest.
  REQUIRE(Commit(s, Block("acme", 12), 10) == StatusCode::kOk);
  CHECK(Present(s, Block("globex", 3)));
  CHECK(Present(s, Block("globex", 4)));
  CHECK_FALSE(Present(s, Block("acme", 10)));
  CHECK(s.Stats().tenants["globex"].evictions == 2);
  // A tenant's own max_registrations evicts its own blocks only.
  StoreOptions t;
  t.limits.tenants["acme"].max_registrations = 2;
  MemoryStore s2(t);
  REQUIRE(Commit(s2, Block("globex", 1), 10) == StatusCode::kOk);
  for (uint8_t n = 10; n <= 12; ++n) REQUIRE(Commit(s2, Block("acme", n), 10) == StatusCode::kOk);
  CHECK_FALSE(Present(s2, Block("acme", 10)));
  CHECK(Present(s2, Block("globex", 1)));
}

TEST_CASE("Eviction: a tenant quota evicts the tenant's own blocks, oldest-used first under prefix-lru") {
  StoreOptions o = WithTenantQuota(3000);
  o.eviction_policy = "prefix-lru";  // the order checked is its; every policy keeps to its tenant: below
  MemoryStore s(o);
  REQUIRE(Commit(s, Block("globex", 9), 5000) == StatusCode::kOk);  // no quota for globex
  REQUIRE(Commit(s, Block("acme", 1), 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 2), 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 3), 1000) == StatusCode::kOk);
  s.Open(AddressOf(Block("acme", 1)));  // block 1 is now more recently used than block 2
  REQUIRE(Commit(s, Block("acme", 4), 1000) == StatusCode::kOk);
  CHECK(Present(s, Block("acme", 1)));
  CHECK_FALSE(Present(s, Block("acme", 2)));
  CHECK(Present(s, Block("acme", 4)));
  CHECK(Present(s, Block("globex", 9)));  // never another tenant's block
  CHECK(s.Stats().tenants["acme"].evictions == 1);
  CHECK(s.Stats().tenants["acme"].usage.bytes == 3000);
}

// The RAM tier copies a block after its reader closed (fs/ram_promoter.cc); before OpenForCopy
// the copy's open was a use, so a block read first could outlive one read after it, and a
// replay through a mount disagreed with the same replay in process.
TEST_CASE("Eviction: a copy the daemon makes for itself is not a use and reorders nothing") {
  MemoryStore s(WithTenantQuota(3000));
  REQUIRE(Commit(s, Block("acme", 1), 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 2), 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 3), 1000) == StatusCode::kOk);
  {
    auto copy = s.OpenForCopy(AddressOf(Block("acme", 1)));  // block 1 stays the least recently used
    REQUIRE(copy.ok());
    CHECK(copy.value()->info().size == 1000);
  }
  CHECK(s.OpenForCopy(AddressOf(Block("acme", 9))).status() == StatusCode::kNotFound);
  REQUIRE(Commit(s, Block("acme", 4), 1000) == StatusCode::kOk);
  CHECK_FALSE(Present(s, Block("acme", 1)));
  CHECK(Present(s, Block("acme", 2)));
  CHECK(Present(s, Block("acme", 4)));
}

// A copy in flight used to count as an open reader, and Admission never takes a block with
// one: the block being copied outlived the one the policy picked. The copy reads on from the
// file it opened; the RAM tier drops the copy of a block that left (store/ram_tier.h).
TEST_CASE("Eviction: a block being copied by the daemon is evicted in its turn, and the copy reads on") {
  test::TempDir tmp;
  std::string error;
  auto s = OpenFileStore(tmp.path(), WithTenantQuota(3000), nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  REQUIRE(Commit(*s, Block("acme", 1), 1000) == StatusCode::kOk);
  REQUIRE(Commit(*s, Block("acme", 2), 1000) == StatusCode::kOk);
  REQUIRE(Commit(*s, Block("acme", 3), 1000) == StatusCode::kOk);
  auto copy = s->OpenForCopy(AddressOf(Block("acme", 1)));
  REQUIRE(copy.ok());
  REQUIRE(Commit(*s, Block("acme", 4), 1000) == StatusCode::kOk);
  CHECK_FALSE(Present(*s, Block("acme", 1)));  // the least recently used, copy or not
  CHECK(Present(*s, Block("acme", 2)));
  std::vector<uint8_t> bytes(1000);
  Result<size_t> n = copy.value()->Read(0, bytes);
  REQUIRE(n.ok());
  CHECK(n.value() == 1000);
  CHECK(bytes == Payload(1000));
  copy.value().reset();
  StoreStats stats = s->Stats();
  CHECK(stats.tenants["acme"].quarantined == 0);  // freed at once: the copy held nothing up
  CHECK(stats.tenants["acme"].usage.bytes == 3000);
}

TEST_CASE("Eviction: pinned and open blocks stay, nothing evictable is EDQUOT and changes nothing") {
  MemoryStore s(WithTenantQuota(2000));
  REQUIRE(Commit(s, Block("acme", 1), 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 2), 1000) == StatusCode::kOk);
  REQUIRE(s.SetPinned(AddressOf(Block("acme", 1)), true) == StatusCode::kOk);
  auto reader = s.Open(AddressOf(Block("acme", 2)));
  REQUIRE(reader.ok());
  CHECK(Commit(s, Block("acme", 3), 1000) == StatusCode::kTenantQuota);
  CHECK(Present(s, Block("acme", 1)));
  CHECK(Present(s, Block("acme", 2)));
  CHECK(s.Stats().tenants["acme"].evictions == 0);
  CHECK(s.Stats().tenants["acme"].usage.reservations == 0);
  reader.value().reset();  // closed: block 2 is evictable again
  CHECK(Commit(s, Block("acme", 3), 1000) == StatusCode::kOk);
  CHECK_FALSE(Present(s, Block("acme", 2)));
  CHECK(s.Evict(AddressOf(Block("acme", 1))) == StatusCode::kBusy);  // pinned
  CHECK(s.SetPinned(AddressOf(Block("acme", 1)), false) == StatusCode::kOk);
  CHECK(s.Evict(AddressOf(Block("acme", 1))) == StatusCode::kOk);
  // A block larger than the whole quota can never fit.
  CHECK(Commit(s, Block("acme", 4), 2001) == StatusCode::kTenantQuota);
}

TEST_CASE("Eviction: the global limit may evict any tenant's blocks, else ENOSPC") {
  StoreOptions o;
  o.limits.global.max_retained_bytes = 4000;
  MemoryStore s(o);
  for (uint8_t n : {1, 2, 3}) REQUIRE(Commit(s, Block("globex", n), 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 4), 1000) == StatusCode::kOk);
  // globex holds 3000, over its fair share (2000 of 4000 for two tenants): its oldest goes.
  REQUIRE(Commit(s, Block("acme", 5), 1000) == StatusCode::kOk);
  CHECK_FALSE(Present(s, Block("globex", 1)));
  CHECK(Present(s, Block("globex", 2)));
  for (uint8_t n : {4, 5}) s.SetPinned(AddressOf(Block("acme", n)), true);
  for (uint8_t n : {2, 3}) s.SetPinned(AddressOf(Block("globex", n)), true);
  CHECK(Commit(s, Block("globex", 6), 1000) == StatusCode::kNoSpace);
}

TEST_CASE("Eviction: one tenant's commit never takes another below its fair share, whatever the policy") {
  for (const std::string& policy : PolicyNames()) {
    CAPTURE(policy);
    StoreOptions o;
    o.limits.global.max_retained_bytes = 2000;
    o.eviction_policy = policy;
    MemoryStore s(o);
    REQUIRE(Commit(s, Block("globex", 1), 1000) == StatusCode::kOk);
    REQUIRE(Commit(s, Block("acme", 2), 1000) == StatusCode::kOk);
    // globex is at its fair share (1000 of 2000): acme's commit evicts acme's own older block,
    // though globex's is the least recently used.
    REQUIRE(Commit(s, Block("acme", 3), 1000) == StatusCode::kOk);
    CHECK(Present(s, Block("globex", 1)));
    CHECK_FALSE(Present(s, Block("acme", 2)));
    // With acme's own blocks pinned, nothing may go for it: ENOSPC, and globex is untouched.
    s.SetPinned(AddressOf(Block("acme", 3)), true);
    CHECK(Commit(s, Block("acme", 4), 1000) == StatusCode::kNoSpace);
    CHECK(Present(s, Block("globex", 1)));
    // A third tenant shares 2000 three ways (666 each): globex's one block would take it to 0,
    // below its share, so not even a newcomer may have it.
    CHECK(Commit(s, Block("initech", 5), 1000) == StatusCode::kNoSpace);
    CHECK(Present(s, Block("globex", 1)));
  }
}

TEST_CASE("Eviction: prefix-aware default evicts a leaf before its ancestors") {
  MemoryStore s(WithTenantQuota(3000));
  CacheIdentity parent = Block("acme", 1);
  CacheIdentity child = parent;
  child.chain = {parent.chain.back(), test::Hash(50)};  // continues the parent's chain
  child.valid_length = child.block_capacity;
  REQUIRE(Commit(s, parent, 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, child, 1000) == StatusCode::kOk);
  REQUIRE(Commit(s, Block("acme", 2), 1000) == StatusCode::kOk);
  s.Open(AddressOf(child));
  s.Open(AddressOf(Block("acme", 2)));
  // The parent is the least recently used block, but it has a resident child: the child goes.
  REQUIRE(Commit(s, Block("acme", 3), 1000) == StatusCode::kOk);
  CHECK(Present(s, parent));
  CHECK_FALSE(Present(s, child));
}

// Regression (review, 2026-12-06): a block was linked to its parent only when the child was
// indexed, so a parent committed after its child (vLLM's connector renames a batch on 4
// threads; a restart loads in INDEX order) counted as a leaf and was evicted before it.
TEST_CASE("Eviction: a parent committed after its child is not taken for a leaf") {
  for (std::string policy : {"prefix-lru", "prefix-reuse", "prefix-tinylfu"}) {
    CAPTURE(policy);
    StoreOptions o = WithTenantQuota(3000);
    o.eviction_policy = policy;
    MemoryStore s(o);
    CacheIdentity parent = Block("acme", 1);
    CacheIdentity child = parent;
    child.chain = {parent.chain.back(), test::Hash(50)};  // continues the parent's chain
    child.valid_length = child.block_capacity;
    REQUIRE(Commit(s, child, 1000) == StatusCode::kOk);  // the child's rename came first
    REQUIRE(Commit(s, parent, 1000) == StatusCode::kOk);
    REQUIRE(Commit(s, Block("acme", 2), 1000) == StatusCode::kOk);
    s.Open(AddressOf(child));
    s.Open(AddressOf(Block("acme", 2)));
    // The parent is the least recently used block, but it has a resident child: the child goes.
    REQUIRE(Commit(s, Block("acme", 3), 1000) == StatusCode::kOk);
    CHECK(Present(s, parent));
    CHECK_FALSE(Present(s, child));
  }
}

TEST_CASE("Quarantine: an open block that is invalidated keeps its bytes until reclaimed") {
  MemoryStore s;
  CacheIdentity id = Block("acme", 1);
  Bytes payload = Payload(5000);
  BlockAddress a = AddressOf(id);
  s.CreateNamespace("acme", a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  s.SetIdentity(r.value(), EncodePhysicalKey(id));
  s.Write(r.value(), 0, payload);
  REQUIRE(s.Commit(r.value()) == StatusCode::kOk);
  auto reader = s.Open(a);
  REQUIRE(reader.ok());
  uint64_t region = reader.value()->info().region_id;
  REQUIRE(s.Invalidate(a) == StatusCode::kOk);
  CHECK_FALSE(Present(s, id));  // gone from the namespace
  auto q = s.ListQuarantine();
  REQUIRE(q.size() == 1);
  CHECK(q[0].region_id == region);
  CHECK(q[0].reason == "invalidated");
  CHECK(q[0].open_handles == 1);
  CHECK(s.Stats().tenants["acme"].usage.quarantined_bytes == 5000);
  CHECK(s.Lookup(id).reason == MissReason::kQuarantined);
  Bytes back(5000);
  CHECK(reader.value()->Read(0, back).value() == 5000);  // the holder still reads its bytes
  CHECK(back == payload);
  CHECK(s.ReclaimDrained(region) == StatusCode::kBusy);  // we still see the handle
  reader.value().reset();
  CHECK(s.ListQuarantine().size() == 1);  // last close alone does not free it
  CHECK(s.ExpireReservations(UINT64_MAX) == 0);
  CHECK(s.ListQuarantine().size() == 1);  // nor does any timeout
  CHECK(s.ReclaimDrained(region) == StatusCode::kOk);
  CHECK(s.ListQuarantine().empty());
  CHECK(s.Stats().tenants["acme"].usage.quarantined_bytes == 0);
  CHECK(s.Stats().tenants["acme"].reclaimed == 1);
}

TEST_CASE("Quarantine: fence, then reclaim --fenced naming the new epoch") {
  MemoryStore s;
  REQUIRE(Commit(s, Block("acme", 1), 100) == StatusCode::kOk);
  auto reader = s.Open(AddressOf(Block("acme", 1)));
  REQUIRE(s.Evict(AddressOf(Block("acme", 1))) == StatusCode::kOk);
  REQUIRE(s.ListQuarantine().size() == 1);
  uint64_t before = s.Epoch();
  CHECK(s.ReclaimFenced(before).status() == StatusCode::kOk);  // no fence yet: nothing
  CHECK(s.ListQuarantine().size() == 1);
  auto fenced = s.Fence();
  REQUIRE(fenced.ok());
  CHECK(fenced.value() == before + 1);
  CHECK(s.ReclaimFenced(before).status() == StatusCode::kFenced);  // not the current epoch
  CHECK(s.ReclaimFenced(fenced.value()).value() == 1);
  CHECK(s.ListQuarantine().empty());
}

TEST_CASE("Fence: in-flight reservations fail with kFenced and their credits return") {
  MemoryStore s;
  CacheIdentity id = Block("acme", 1);
  BlockAddress a = AddressOf(id);
  s.CreateNamespace("acme", a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(s.OpenWriter(r.value()) == StatusCode::kOk);
  REQUIRE(s.Write(r.value(), 0, Payload(100)).ok());
  REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
  REQUIRE(s.Fence().ok());
  CHECK(s.Write(r.value(), 100, Payload(10)).status() == StatusCode::kFenced);
  CHECK(s.Stats().tenants["acme"].usage.reservations == 0);
  CHECK(s.Stats().tenants["acme"].usage.inflight_bytes == 0);
  CHECK(s.FillOutcome(a) == FillState::kFenced);
  CHECK(s.FindReservation(a) == std::nullopt);
  s.CloseWriter(r.value());
  CHECK(s.Commit(r.value()) == StatusCode::kNotFound);  // gone with its last writer
  CHECK(s.Lookup(id).reason == MissReason::kFenced);
  // For one lease a new fill of the same block is ESTALE too (adr/0006): the fenced writer may
  // still be about to commit.
  CHECK(Commit(s, id, 100) == StatusCode::kFenced);
  CHECK(s.FillOutcome(a) == FillState::kFenced);
}

TEST_CASE("Fence: after one lease a fenced block fills cleanly in the new epoch") {
  StoreOptions o;
  o.reservation_lease_ns = 1'000'000;  // 1 ms
  MemoryStore s(o);
  CacheIdentity id = Block("acme", 1);
  BlockAddress a = AddressOf(id);
  s.CreateNamespace("acme", a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(s.OpenWriter(r.value()) == StatusCode::kOk);
  REQUIRE(s.Fence().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.CloseWriter(r.value());
  CHECK(Commit(s, id, 100) == StatusCode::kOk);
  CHECK(s.FillOutcome(a) == FillState::kFinished);
}

// Regression (review, 2026-12-06): region ids were epoch << 32 | a sequence that never reset
// nor stopped, so past 2^32 fills in one run (about 10 days at 5,000 fills a second) it ran
// into the epoch's bits and ids repeated: a quarantine rename replaced another quarantined
// block's file, and a reclaim of one removed the other's bytes. Now each epoch counts its own,
// and one that used them up moves the store to the next epoch (a fence) first.
TEST_CASE("Fence: an epoch that gave out its region ids fences the store into the next, ids never repeat") {
  StoreOptions options;
  options.region_ids_per_epoch = 3;
  MemoryStore s(options);
  const uint64_t first = s.Epoch();
  std::set<uint64_t> regions;
  auto region_of = [&](const CacheIdentity& id) {
    auto reader = s.Open(AddressOf(id));
    REQUIRE(reader.ok());
    return reader.value()->info().region_id;
  };
  for (int i = 1; i <= 2; i++) {
    REQUIRE(Commit(s, Block("acme", i), 100) == StatusCode::kOk);
    regions.insert(region_of(Block("acme", i)));
  }
  // The epoch's third id goes to a fill still open when the fourth is asked for.
  CacheIdentity open_id = Block("acme", 3);
  BlockAddress open_a = AddressOf(open_id);
  auto open_fill = s.Reserve(open_a, kOwner);
  REQUIRE(open_fill.ok());
  REQUIRE(s.OpenWriter(open_fill.value()) == StatusCode::kOk);
  REQUIRE(s.SetIdentity(open_fill.value(), EncodePhysicalKey(open_id)) == StatusCode::kOk);
  REQUIRE(s.Write(open_fill.value(), 0, Payload(100)).ok());
  CHECK(s.Epoch() == first);
  REQUIRE(Commit(s, Block("acme", 4), 100) == StatusCode::kOk);  // the store fenced itself first
  CHECK(s.Epoch() == first + 1);
  CHECK(s.Write(open_fill.value(), 100, Payload(10)).status() == StatusCode::kFenced);  // as at any fence
  s.CloseWriter(open_fill.value());
  regions.insert(region_of(Block("acme", 4)));
  for (int i = 5; i <= 9; i++) {
    REQUIRE(Commit(s, Block("acme", i), 100) == StatusCode::kOk);
    regions.insert(region_of(Block("acme", i)));
  }
  CHECK(s.Epoch() == first + 2);  // 3 ids an epoch: 1-2 and the fenced fill, 4-6, 7-9
  CHECK(regions.size() == 8);     // every committed block its own id
  for (uint64_t r : regions) CHECK((r >> 32) >= first);
  // Counted for the operator (gpucache_automatic_fences_total); an operator's fence is not.
  CHECK(s.Stats().automatic_fences == 2);
  REQUIRE(s.Fence().ok());
  CHECK(s.Stats().automatic_fences == 2);
}

// Found by review of the fix above: two fills that both found the epoch used up both fenced,
// so the second fence also fenced the fill the first had just admitted in the new epoch.
TEST_CASE("Fence: fills racing past a used-up epoch fence it once") {
  StoreOptions options;
  options.region_ids_per_epoch = 1;  // every fill after the first ends its epoch
  MemoryStore s(options);
  const uint64_t first = s.Epoch();
  constexpr int kThreads = 4, kEach = 150;
  s.CreateNamespace("acme", AddressOf(Block("acme", 0)).ns, kOwner);
  // Every Reserve takes one id (its fill may then be fenced by the next one's fence before it
  // returns: kFenced, as at any fence), so N fills end N - 1 epochs.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; i++) {
        CacheIdentity id = Block("acme", 0);
        id.chain.back()[0] = static_cast<uint8_t>(t);
        id.chain.back()[1] = static_cast<uint8_t>(i);
        Result<ReservationId> r = s.Reserve(AddressOf(id), kOwner);
        CHECK((r.ok() || r.status() == StatusCode::kFenced));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(s.Epoch() - first == uint64_t(kThreads * kEach - 1));  // one fence per used-up epoch, no more
}

TEST_CASE("FillFor: a fill is its filler's and any admin's, and none once fenced or finished") {
  MemoryStore s;
  BlockAddress a = AddressOf(Block("acme", 1));
  s.CreateNamespace("acme", a.ns, kOwner);
  CHECK(s.FillFor(a, kOwner.uid).status() == StatusCode::kNotFound);  // no fill yet
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  CHECK(s.FillFor(a, kOwner.uid).value() == r.value());
  CHECK(s.FillFor(a, std::nullopt).value() == r.value());             // an admin
  CHECK(s.FillFor(a, kOwner.uid + 1).status() == StatusCode::kBusy);  // another uid, same gid
  REQUIRE(s.Fence().ok());
  CHECK(s.FillFor(a, kOwner.uid).status() == StatusCode::kNotFound);
  CHECK(s.FillFor(a, std::nullopt).status() == StatusCode::kNotFound);
  CHECK(s.FillFor(AddressOf(Block("acme", 2)), kOwner.uid).status() == StatusCode::kNotFound);
  REQUIRE(Commit(s, Block("acme", 2), 10) == StatusCode::kOk);
  CHECK(s.FillFor(AddressOf(Block("acme", 2)), kOwner.uid).status() == StatusCode::kNotFound);  // finished: a block now
}

TEST_CASE("Fill outcomes: pending, finished, failed") {
  MemoryStore s;
  BlockAddress a = AddressOf(Block("acme", 1));
  s.CreateNamespace("acme", a.ns, kOwner);
  CHECK(s.FillOutcome(a) == std::nullopt);
  auto r = s.Reserve(a, kOwner);
  CHECK(s.FillOutcome(a) == FillState::kPending);
  s.Abort(r.value());
  CHECK(s.FillOutcome(a) == FillState::kFailed);
  REQUIRE(Commit(s, Block("acme", 1), 10) == StatusCode::kOk);
  CHECK(s.FillOutcome(a) == FillState::kFinished);
}

TEST_CASE("Drain: admits refused, reads and in-flight fills go on, rollback and finish") {
  MemoryStore s;
  REQUIRE(Commit(s, Block("acme", 1), 10) == StatusCode::kOk);
  CacheIdentity inflight = Block("acme", 2);
  BlockAddress a = AddressOf(inflight);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(s.Drain(DrainAction::kStart) == StatusCode::kOk);
  CHECK(Commit(s, Block("acme", 3), 10) == StatusCode::kDraining);
  CHECK(s.Open(AddressOf(Block("acme", 1))).ok());
  s.SetIdentity(r.value(), EncodePhysicalKey(inflight));
  s.Write(r.value(), 0, Payload(10));
  CHECK(s.Commit(r.value()) == StatusCode::kOk);
  CHECK(s.Drain(DrainAction::kRollback) == StatusCode::kOk);
  CHECK(Commit(s, Block("acme", 3), 10) == StatusCode::kOk);
  uint64_t epoch = s.Epoch();
  CHECK(s.Drain(DrainAction::kFinish) == StatusCode::kInvalidArgument);  // no drain running
  REQUIRE(s.Drain(DrainAction::kStart) == StatusCode::kOk);
  REQUIRE(s.Drain(DrainAction::kFinish) == StatusCode::kOk);
  CHECK(s.Epoch() == epoch + 1);
  CHECK(s.Drain(DrainAction::kRollback) == StatusCode::kInvalidArgument);  // too late
  CHECK(s.Stats().draining);
}

TEST_CASE("Lease: an idle reservation is abandoned, one with a writer is not") {
  StoreOptions o;
  o.reservation_lease_ns = 1000;
  MemoryStore s(o);
  BlockAddress a = AddressOf(Block("acme", 1)), b = AddressOf(Block("acme", 2));
  s.CreateNamespace("acme", a.ns, kOwner);
  auto idle = s.Reserve(a, kOwner);
  auto busy = s.Reserve(b, kOwner);
  REQUIRE(s.OpenWriter(busy.value()) == StatusCode::kOk);
  CHECK(s.ExpireReservations(UINT64_MAX / 2) == 1);
  CHECK(s.FindReservation(a) == std::nullopt);
  CHECK(s.FillOutcome(a) == FillState::kFailed);
  CHECK(s.FindReservation(b).has_value());
  CHECK(s.Stats().tenants["acme"].expired == 1);
  (void)idle;
}

// Review of stop 44: leases were counted on the wall clock, so an NTP step back of hours kept a
// crashed writer's reservation (its address, its quota bytes) for hours, and a step forward
// expired every idle fill at once. They count on CLOCK_BOOTTIME, which no step moves: a lease
// runs out a lease after the fill's last activity on that clock, whatever the wall clock says,
// and so does a fence's window. The reservation still shows wall-clock times.
TEST_CASE("Lease: reservations and fence windows run on the boot clock, not the wall clock") {
  StoreOptions o;
  o.reservation_lease_ns = 60ull * 1000 * 1000 * 1000;
  MemoryStore s(o);
  BlockAddress a = AddressOf(Block("acme", 1));
  s.CreateNamespace("acme", a.ns, kOwner);
  const uint64_t wall_before = NowNs();
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  Result<ReservationInfo> info = s.StatReservation(r.value());
  REQUIRE(info.ok());
  CHECK(info->create_time_ns >= wall_before);  // shown as the .part's times: the wall clock
  CHECK(s.ExpireReservations(LeaseNowNs()) == 0);  // within its lease
  CHECK(s.ExpireReservations(LeaseNowNs() + o.reservation_lease_ns + 1'000'000'000) == 1);
  auto held = s.Reserve(AddressOf(Block("acme", 2)), kOwner);
  REQUIRE(held.ok());
  REQUIRE(s.OpenWriter(held.value()) == StatusCode::kOk);
  REQUIRE(s.Fence().ok());
  CHECK(s.RecentlyFenced(AddressOf(Block("acme", 2)), LeaseNowNs()));
  CHECK_FALSE(s.RecentlyFenced(AddressOf(Block("acme", 2)), LeaseNowNs() + o.reservation_lease_ns + 1));
  s.CloseWriter(held.value());
}

TEST_CASE("FileStore: quarantine and pins survive a restart") {
  test::TempDir tmp;
  uint64_t region;
  {
    std::string error;
    StoreOptions defaults;
    auto s = OpenFileStore(tmp.path(), defaults, nullptr, &error);
    REQUIRE(Commit(*s, Block("acme", 1), 5000) == StatusCode::kOk);
    REQUIRE(Commit(*s, Block("acme", 2), 5000) == StatusCode::kOk);
    REQUIRE(s->SetPinned(AddressOf(Block("acme", 2)), true) == StatusCode::kOk);
    auto reader = s->Open(AddressOf(Block("acme", 1)));
    region = reader.value()->info().region_id;
    REQUIRE(s->Evict(AddressOf(Block("acme", 1))) == StatusCode::kOk);
    CHECK_FALSE(std::filesystem::exists(s->BackingPath(AddressOf(Block("acme", 1)))));
  }
  FileStoreReport report;
  std::string error;
  StoreOptions defaults;
  auto s = OpenFileStore(tmp.path(), defaults, &report, &error);
  REQUIRE(s);
  CHECK(report.quarantined == 1);
  auto q = s->ListQuarantine();
  REQUIRE(q.size() == 1);
  CHECK(q[0].region_id == region);
  CHECK(s->Stat(AddressOf(Block("acme", 2)))->pinned);
  CHECK(s->ReclaimFenced(s->Epoch()).value() == 1);  // the restart was a fence
  CHECK(std::filesystem::is_empty(tmp.path() + "/quarantine"));
}

}  // namespace
}  // namespace gpucache
