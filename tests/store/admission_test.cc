// Admission alone, over a BlockIndex filled by hand: limits, counters, and the victims it
// names (it evicts nothing itself; a refusal names none).
#include "store/admission.h"

#include <doctest/doctest.h>

#include <set>

#include "store/memory_store.h"
#include "tests/store/store_parts_test.h"

namespace gpucache {
namespace {

using test::BlockNo;
using test::RecordOf;
using Id = BlockIndex::Id;

struct Parts {
  explicit Parts(std::string_view policy = "lru") : admission{limits, policy, index, medium} {}
  ResourceLimits limits;
  BlockIndex index;
  MemoryMedium medium;
  Admission admission;

  Id Add(const std::string& tenant, unsigned n, uint64_t size,
         std::optional<Id> parent = std::nullopt) {
    // Chain hashes that link a block to `parent` only (odd tails, even parents of roots).
    IndexKeys keys = test::FullKeys();
    keys.tail = 2 * uint64_t{n} + 1;
    keys.parent = parent ? index.at(*parent).tail : 2 * uint64_t{n} + 2;
    std::optional<Id> id = index.Insert(test::Block(BlockNo(tenant, n), RecordOf(size), keys, Owner{}));
    REQUIRE(id);
    admission.Indexed(*id, parent, false, PolicyKeyOf(BlockNo(tenant, n)));
    return *id;
  }
};

TEST_CASE("Admission: counts what is indexed and unindexed, per tenant and in total") {
  Parts p;
  Id a = p.Add("acme", 1, 100);
  p.Add("acme", 2, 50);
  p.Add("globex", 1, 7);
  CHECK(p.admission.Counters("acme").usage.blocks == 2);
  CHECK(p.admission.Counters("acme").usage.bytes == 150);
  CHECK(p.admission.GlobalUsage().bytes == 157);
  p.admission.Unindexing(a);
  p.index.Remove(a);
  CHECK(p.admission.Counters("acme").usage.bytes == 50);
  p.admission.Quarantined("acme", 100);
  CHECK(p.admission.GlobalUsage().retained_bytes() == 157);
  p.admission.Reclaimed("acme", 100);
  CHECK(p.admission.GlobalUsage().retained_bytes() == 57);
  CHECK(p.admission.Counters("acme").reclaimed == 1);
}

TEST_CASE("Admission: in-flight requests and bytes are limited, draining refuses new fills") {
  Parts p;
  p.limits.tenants["acme"].max_inflight_requests = 1;
  p.limits.global.max_inflight_bytes = 1000;
  std::vector<Id> victims;
  CHECK(p.admission.AdmitReservation("acme", victims) == StatusCode::kOk);
  p.admission.ReservationAdmitted("acme");
  CHECK(p.admission.AdmitReservation("acme", victims) == StatusCode::kExhausted);
  CHECK(p.admission.AdmitReservation("globex", victims) == StatusCode::kOk);

  CHECK(p.admission.AdmitBytes("acme", 0, 1000) == StatusCode::kOk);
  p.admission.ReservationResized("acme", 0, 600);
  CHECK(p.admission.AdmitBytes("globex", 0, 401) == StatusCode::kExhausted);
  CHECK(p.admission.AdmitBytes("acme", 600, 1000) == StatusCode::kOk);
  CHECK(p.admission.AdmitBytes("acme", 600, 100) == StatusCode::kOk);  // shrinking
  CHECK(p.admission.AdmitBytes("acme", 0, (256ull << 20) + 1) == StatusCode::kTooLarge);
  p.admission.ReservationReleased("acme", 600);
  CHECK(p.admission.GlobalUsage().inflight_bytes == 0);
  CHECK(p.admission.AdmitReservation("acme", victims) == StatusCode::kOk);

  p.admission.SetDraining(true);
  CHECK(p.admission.AdmitReservation("globex", victims) == StatusCode::kDraining);
  CHECK(victims.empty());
}

TEST_CASE("Admission: room for a commit names the least recently used, and counts the evictions") {
  Parts p;
  p.limits.global.max_retained_bytes = 300;
  Id first = p.Add("acme", 1, 100);
  Id second = p.Add("acme", 2, 100);
  p.Add("acme", 3, 100);
  p.admission.Used(first);  // now the second is the oldest use
  std::vector<Id> victims;
  REQUIRE(p.admission.RoomForCommit("acme", 100, victims) == StatusCode::kOk);
  CHECK(victims == std::vector<Id>{second});
  CHECK(p.admission.Counters("acme").evictions == 1);
  // Nothing is taken out of the index by Admission: the store does that.
  CHECK(p.index.size() == 3);
}

TEST_CASE("Admission: the bytes of commits sealing count against the retained-byte limits") {
  Parts p;
  p.limits.tenants["acme"].max_retained_bytes = 300;
  Id old = p.Add("acme", 1, 100);
  std::vector<Id> victims;
  CHECK(p.admission.RoomForCommit("acme", 200, victims) == StatusCode::kOk);
  CHECK(victims.empty());
  p.admission.CommitSealing("acme", 200);
  // 100 retained, 200 sealing: another 100 takes the retained block, 200 more cannot fit.
  CHECK(p.admission.RoomForCommit("acme", 200, victims) == StatusCode::kTenantQuota);
  CHECK(victims.empty());
  CHECK(p.admission.RoomForCommit("acme", 100, victims) == StatusCode::kOk);
  CHECK(victims == std::vector<Id>{old});
  p.admission.CommitEnded("acme", 200);
  CHECK(p.admission.Counters("acme").usage.committing_bytes == 0);
  CHECK(p.admission.Counters("acme").usage.retained_bytes() == 100);  // never counted as retained
}

TEST_CASE("Admission: a refusal names no victim, pinned and open blocks never go") {
  Parts p;
  p.limits.global.max_retained_bytes = 300;
  Id a = p.Add("acme", 1, 100);
  Id b = p.Add("acme", 2, 100);
  p.Add("acme", 3, 100);
  p.index.at(a).pinned = true;
  p.index.ReaderOpened(b);
  std::vector<Id> victims;
  // 200 bytes needed, only the third block (100) may go: refused whole.
  CHECK(p.admission.RoomForCommit("acme", 200, victims) == StatusCode::kNoSpace);
  CHECK(victims.empty());
  CHECK(p.admission.Counters("acme").evictions == 0);
  CHECK(p.admission.RoomForCommit("acme", 301, victims) == StatusCode::kNoSpace);
  CHECK(victims.empty());
}

TEST_CASE("Admission: a tenant quota takes only the tenant's own blocks") {
  Parts p;
  p.limits.tenants["acme"].max_retained_bytes = 200;
  p.Add("globex", 1, 100);  // the oldest, but not acme's
  Id own = p.Add("acme", 1, 100);
  p.Add("acme", 2, 100);
  std::vector<Id> victims;
  REQUIRE(p.admission.RoomForCommit("acme", 100, victims) == StatusCode::kOk);
  CHECK(victims == std::vector<Id>{own});
  victims.clear();
  p.index.at(own).pinned = true;
  p.index.at(*p.index.Find(BlockNo("acme", 2))).pinned = true;
  CHECK(p.admission.RoomForCommit("acme", 100, victims) == StatusCode::kTenantQuota);
  CHECK(victims.empty());
}

TEST_CASE("Admission: another tenant's blocks go only down to its fair share") {
  Parts p;
  p.limits.global.max_retained_bytes = 400;
  for (unsigned i = 0; i < 4; ++i) p.Add("acme", i, 100);  // acme holds everything
  std::vector<Id> victims;
  // globex needs 200: acme's fair share of 400 between two tenants is 200, so two may go.
  REQUIRE(p.admission.RoomForCommit("globex", 200, victims) == StatusCode::kOk);
  CHECK(victims.size() == 2);
  victims.clear();
  // 300 would take acme below its share: refused, nothing named.
  CHECK(p.admission.RoomForCommit("globex", 300, victims) == StatusCode::kNoSpace);
  CHECK(victims.empty());
}

// Regression (review, 2026-12-06): the fair share counted tenants with open reservations and
// no bytes, so any tenant could lower every other's protection by creating empty .part files.
TEST_CASE("Admission: tenants holding no bytes do not divide the fair share") {
  Parts p;
  p.limits.global.max_retained_bytes = 400;
  for (unsigned i = 0; i < 4; ++i) p.Add("acme", i, 100);
  for (const char* idle : {"initech", "umbrella"}) p.admission.ReservationAdmitted(idle);
  std::vector<Id> victims;
  // Two tenants hold bytes (acme, and globex once it commits): acme keeps 200 of 400.
  CHECK(p.admission.RoomForCommit("globex", 300, victims) == StatusCode::kNoSpace);
  CHECK(victims.empty());
  REQUIRE(p.admission.RoomForCommit("globex", 200, victims) == StatusCode::kOk);
  CHECK(victims.size() == 2);
}

TEST_CASE("Admission: registrations are made room for like bytes") {
  Parts p;
  p.limits.global.max_registrations = 2;
  p.Add("acme", 1, 100);
  p.Add("acme", 2, 100);
  std::vector<Id> victims;
  REQUIRE(p.admission.AdmitReservation("acme", victims) == StatusCode::kOk);
  CHECK(victims.size() == 1);
}

TEST_CASE("Admission: a device that says it has room is not answered by eviction") {
  Parts p;
  p.Add("acme", 1, 1 << 20);
  auto pending = p.medium.Prepare(ReservationInfo{});
  REQUIRE(pending.ok());
  std::vector<Id> victims;
  Medium::DeviceSpace roomy{.free = 100ull << 20, .total = 200ull << 20};
  CHECK(p.admission.RoomOnDevice(*pending.value(), roomy, "acme", 4096, victims) ==
        StatusCode::kNoSpace);
  CHECK(victims.empty());
  Medium::DeviceSpace full{.free = 0, .total = 2ull << 20};
  CHECK(p.admission.RoomOnDevice(*pending.value(), full, "acme", 4096, victims) == StatusCode::kOk);
  CHECK(victims.size() == 1);
}

// Regression (review, 2026-12-07): a commit's room kept its chain, but room on a full device
// (the default's only eviction) still took the block the fill continues: a long prompt kept
// only its tail. And a one-hash chain, whose parent hash is its own tail, was refused for its
// own earlier refusal as if its parent had been refused.
TEST_CASE("Admission: room on a full device keeps the fill's chain, and a one-hash chain is not its own refused parent") {
  Parts p("prefix-lru");
  Id a = p.Add("acme", 1, 1 << 20);
  Id b = p.Add("acme", 2, 1 << 20, a);
  auto pending = p.medium.Prepare(ReservationInfo{});
  REQUIRE(pending.ok());
  Medium::DeviceSpace full{.free = 0, .total = 3ull << 20};
  std::vector<Id> victims;
  CHECK(p.admission.RoomOnDevice(*pending.value(), full, "acme", 4096, victims, b) == StatusCode::kNoSpace);
  CHECK(victims.empty());
  Id c = p.Add("acme", 3, 1 << 20);
  CHECK(p.admission.RoomOnDevice(*pending.value(), full, "acme", 4096, victims, b) == StatusCode::kOk);
  CHECK(victims == std::vector<Id>{c});

  Parts q("prefix-lru");
  q.limits.tenants["acme"].max_retained_bytes = 300;
  Id x = q.Add("acme", 1, 100), y = q.Add("acme", 2, 100), z = q.Add("acme", 3, 100);
  for (Id held : {x, y, z}) q.index.ReaderOpened(held);  // open: none may go
  const Admission::ChainLink self{q.index.NamespaceOf(x), 77, 77};
  victims.clear();
  CHECK(q.admission.RoomForCommit("acme", 100, victims, std::nullopt, self) == StatusCode::kTenantQuota);
  q.index.ReaderClosed(z);
  CHECK(q.admission.RoomForCommit("acme", 100, victims, std::nullopt, self) == StatusCode::kOk);
  CHECK(victims == std::vector<Id>{z});
}

// Regression (review, 2026-12-06): victims were chosen one at a time while the blocks already
// chosen stayed in the policy's prefix tree, so once a chain's leaf was chosen its parent still
// had a child, and the next pick fell back to the least recent block anywhere: the chain's root.
TEST_CASE("Admission: a commit that needs two victims takes a chain's two last blocks") {
  for (std::string policy : {"prefix-lru", "prefix-reuse", "prefix-tinylfu"}) {
    CAPTURE(policy);
    Parts p(policy);
    p.limits.tenants["acme"].max_retained_bytes = 400;
    Id r = p.Add("acme", 1, 100);
    Id c1 = p.Add("acme", 2, 100, r);
    Id c2 = p.Add("acme", 3, 100, c1);
    Id c3 = p.Add("acme", 4, 100, c2);
    for (Id id : {r, c1, c2, c3}) p.admission.Used(id);  // a request reads the chain in order
    // Refused (the root is pinned, 400 bytes needed): nothing named, and the choice it made
    // and undid leaves the policy as it was.
    p.index.at(r).pinned = true;
    std::vector<Id> victims;
    CHECK(p.admission.RoomForCommit("acme", 400, victims) == StatusCode::kTenantQuota);
    CHECK(victims.empty());
    p.index.at(r).pinned = false;
    REQUIRE(p.admission.RoomForCommit("acme", 200, victims) == StatusCode::kOk);
    CHECK(victims == std::vector<Id>{c3, c2});
    // Granted, the store takes them out; the next victim is the new leaf.
    for (Id id : victims) {
      p.admission.Unindexing(id);
      p.index.Remove(id);
    }
    victims.clear();
    REQUIRE(p.admission.RoomForCommit("acme", 300, victims) == StatusCode::kOk);
    CHECK(victims == std::vector<Id>{c1});
  }
}

// Regression (review, 2026-12-06): each pick restarted at the front of the recency list and
// asked again about every block already chosen (and every refused one), O(k^2) for k victims:
// 8,193 victims took 1.6 s under the store's lock. Chosen blocks now leave the order at once.
TEST_CASE("Admission: choosing k victims asks about O(k) blocks, whatever the policy") {
  for (const std::string& policy : PolicyNames()) {
    CAPTURE(policy);
    Parts p(policy);
    constexpr unsigned kBlocks = 2048, kRefused = 16;
    p.limits.tenants["acme"].max_retained_bytes = kBlocks * 100;
    std::optional<Id> parent;
    for (unsigned i = 0; i < kBlocks; ++i) {
      // Chains of 8 blocks, the oldest few pinned (walked past, never chosen).
      Id id = p.Add("acme", i, 100, i % 8 == 0 ? std::nullopt : parent);
      if (i < kRefused) p.index.at(id).pinned = true;
      parent = id;
    }
    std::vector<Id> victims;
    uint64_t before = p.admission.eligibility_checks();
    constexpr uint64_t kVictims = kBlocks / 2;
    REQUIRE(p.admission.RoomForCommit("acme", kVictims * 100, victims) == StatusCode::kOk);
    CHECK(victims.size() == kVictims);
    CHECK(std::set<Id>(victims.begin(), victims.end()).size() == kVictims);
    // Per victim: itself and the refused blocks before it, and a few more (prefix-reuse looks at
    // the head of each of its lists); asking again about every block already chosen was ~k^2/2.
    CHECK(p.admission.eligibility_checks() - before <= kVictims * (kRefused + 4));
  }
}

// A medium of two devices, for the room a full one needs: a stored payload says which device
// it is on, a pending one is on device 1.
struct OnDevice final : StoredPayload {
  explicit OnDevice(int d) : dev(d) {}
  int dev;
};
struct PendingOnOne final : PendingPayload {};
struct TwoDevices final : Medium {
  MemoryMedium m;
  bool Load(MediumReport& r, std::string& e) override { return m.Load(r, e); }
  StatusCode CreateNamespace(std::string_view t, std::string_view n, Owner o) override { return m.CreateNamespace(t, n, o); }
  StatusCode RemoveNamespace(std::string_view t, std::string_view n) override { return m.RemoveNamespace(t, n); }
  Result<std::shared_ptr<PendingPayload>> Prepare(const ReservationInfo& i) override { return m.Prepare(i); }
  Result<size_t> Write(PendingPayload& p, uint64_t o, std::span<const uint8_t> d) override { return m.Write(p, o, d); }
  StatusCode Truncate(PendingPayload& p, uint64_t size) override { return m.Truncate(p, size); }
  Result<Sealed> Seal(PendingPayload& p, const BlockInfo& d, std::optional<BlockLocation>& r) override {
    return m.Seal(p, d, r);
  }
  void Discard(PendingPayload& p) override { m.Discard(p); }
  Result<Opened> Open(const BlockInfo& i, const std::shared_ptr<StoredPayload>& st) override { return m.Open(i, st); }
  Result<Held> ReadHeld(const BlockInfo& i, const std::shared_ptr<StoredPayload>& st) override { return m.ReadHeld(i, st); }
  std::shared_ptr<StoredPayload> Quarantine(const BlockInfo& i, const std::shared_ptr<StoredPayload>& st) override {
    return m.Quarantine(i, st);
  }
  StatusCode Drop(const BlockInfo& i, const std::shared_ptr<StoredPayload>& st) override { return m.Drop(i, st); }
  StatusCode PersistEpoch(uint64_t e) override { return m.PersistEpoch(e); }
  void PersistPins(const std::vector<PinnedBlock>& p) override { m.PersistPins(p); }
  MediumIoStats IoStats() const override { return m.IoStats(); }
  bool SharesDevice(const PendingPayload&, const StoredPayload* st) const override {
    return static_cast<const OnDevice*>(st)->dev == 1;
  }
};

// Review of stop 44: room on a full device weighed another tenant's fair share of that device
// against all it held, on every device, so with two data directories a tenant's blocks on the
// full one could all go while its blocks elsewhere made it look protected.
TEST_CASE("Admission: a full device leaves each tenant its share of that device, whatever it holds elsewhere") {
  ResourceLimits limits;
  BlockIndex index;
  TwoDevices medium;
  Admission admission{limits, "lru", index, medium};
  auto add = [&](const std::string& tenant, unsigned n, int dev) {
    IndexKeys keys = test::FullKeys();
    keys.tail = 2 * uint64_t{n} + 1;
    keys.parent = 2 * uint64_t{n} + 2;
    std::optional<Id> id = index.Insert(test::Block(BlockNo(tenant, n), RecordOf(1 << 20), keys, Owner{}),
                                        std::make_shared<OnDevice>(dev));
    REQUIRE(id);
    admission.Indexed(*id, std::nullopt, false, PolicyKeyOf(BlockNo(tenant, n)));
  };
  // Device 1 (16 MiB, full): globex 10 MiB, acme 6 MiB. Device 2: globex 10 MiB more.
  for (unsigned i = 0; i < 10; i++) add("globex", i, 1);
  for (unsigned i = 10; i < 20; i++) add("globex", i, 2);
  for (unsigned i = 0; i < 6; i++) add("acme", i, 1);
  PendingOnOne pending;
  const Medium::DeviceSpace full{.free = 0, .total = 16ull << 20};
  std::vector<Id> victims;
  // acme needs 10 MiB there: its own 6 MiB and globex's blocks above globex's share of the
  // device (8 MiB of 16) are all that may go, 8 MiB: not enough, so nothing goes.
  CHECK(admission.RoomOnDevice(pending, full, "acme", 10ull << 20, victims) == StatusCode::kNoSpace);
  CHECK(victims.empty());
  // 7 MiB (with the slack, 8 blocks) may: acme's 6 and 2 of globex's, which keeps its 8 MiB.
  REQUIRE(admission.RoomOnDevice(pending, full, "acme", 7ull << 20, victims) == StatusCode::kOk);
  size_t of_globex = 0;
  for (Id v : victims) of_globex += index.namespaces().TenantOf(index.NamespaceOf(v)) == "globex";
  CHECK(victims.size() == 8);
  CHECK(of_globex == 2);
}

}  // namespace
}  // namespace gpucache
