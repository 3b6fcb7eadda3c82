// A pack holds one tenant's blocks, whichever way it was made (an admin's `cold pack` of every
// tenant, the after-commit write-back queue), and a retired tenant's purge is complete only when
// none of its bytes are left in the bucket.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "cold/manifest.h"
#include "cold/ops.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {

constexpr uint64_t kNow = 2'000'000'000'000'000'000ull;

// The set of tenants each manifest in `s3` lists, one set per manifest.
std::vector<std::set<std::string>> TenantsPerManifest(const MemoryObjectStore& s3) {
  std::vector<std::set<std::string>> out;
  for (const auto& [key, bytes] : s3.Objects()) {
    if (key.find("/manifests/") == std::string::npos) continue;
    DecodedManifest d = DecodeManifest(bytes);
    REQUIRE(d.error == ManifestError::kNone);
    std::set<std::string> tenants;
    for (const ManifestEntry& e : d.manifest.entries) tenants.insert(e.address.tenant);
    out.push_back(tenants);
  }
  return out;
}

void CommitOf(MemoryStore& hot, int i, const std::string& tenant) {
  REQUIRE(CommitBlock(hot, NthIdentity(i, tenant), PayloadOf(i, 1000)) == StatusCode::kOk);
}

}  // namespace

// Review of stop 51: an admin's `cold pack` of every tenant filled each pack in index order,
// so one pack held several tenants' blocks; a retired tenant's purge then kept that manifest
// (and the tenant's bytes in its object) and said it was complete.
TEST_CASE("Cold packs: an admin's pack of every tenant puts each tenant's blocks in packs of their own") {
  MemoryObjectStore s3;
  MemoryStore hot;
  for (int i = 0; i < 3; i++) {
    CommitOf(hot, i, "acme");
    CommitOf(hot, i, "globex");
  }
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  Sink sink(s3, kPrefix, {});
  PackOptions pack;
  pack.max_blocks = 100;
  BackfillReport r = ops.Backfill(hot, sink, "", 1 << 20, pack);
  REQUIRE(r.blocks == 6);
  CHECK(r.packs == 2);
  REQUIRE(sink.Drain().uploaded == 2);
  auto manifests = TenantsPerManifest(s3);
  REQUIRE(manifests.size() == 2);
  for (const auto& tenants : manifests) CHECK(tenants.size() == 1);
}

TEST_CASE("Cold packs: the after-commit queue packs each tenant's commits apart, in their order") {
  MemoryStore hot;
  MemoryObjectStore s3;
  ColdTierOptions o;
  o.prefix = kPrefix;
  o.write_back = WriteBack::kAfterCommit;
  o.flush_interval_ms = 3'600'000;  // rounds only when the test runs one
  o.sink.redrive_interval_ms = 0;
  ColdTier tier(hot, s3, o, TestKeys());
  hot.SetCommitObserver([&](const BlockAddress& a) { tier.OnCommitted(a); });
  // Interleaved, as engines of two tenants commit.
  for (int i = 0; i < 3; i++) {
    CommitOf(hot, i, "globex");
    CommitOf(hot, i, "acme");
  }
  tier.PackQueued();
  REQUIRE(tier.DrainNow().uploaded == 2);
  auto manifests = TenantsPerManifest(s3);
  REQUIRE(manifests.size() == 2);
  for (const auto& tenants : manifests) CHECK(tenants.size() == 1);
  CHECK(tier.Stats().packed_blocks == 6);
  // Each pack lays its tenant's blocks out in the order they were committed.
  for (const auto& [key, bytes] : s3.Objects()) {
    if (key.find("/manifests/") == std::string::npos) continue;
    DecodedManifest d = DecodeManifest(bytes);
    REQUIRE(d.manifest.entries.size() == 3);
    const std::string tenant = d.manifest.entries[0].address.tenant;
    for (int i = 0; i < 3; i++) CHECK(d.manifest.entries[i].address == AddressOf(NthIdentity(i, tenant)));
  }
}

// A manifest written before packs held one tenant's blocks still lists two: the purge of one of
// them keeps it and names it, and says it is not complete (exit 3 from gpucachectl).
TEST_CASE("Cold packs: a purge that keeps a manifest listing another tenant's blocks is not complete") {
  MemoryObjectStore s3;
  PackBuilder b(kPrefix, TestKeyring());
  for (const char* tenant : {"acme", "globex"}) {
    CacheIdentity id = NthIdentity(0, tenant);
    b.Add(AddressOf(id), EncodePhysicalKey(id), PayloadOf(0, 1000));
  }
  PackedPair mixed = b.Build(1'700'000'000'000'000'000ull);
  Sink sink(s3, kPrefix, {});
  PackedPair copy = mixed;
  REQUIRE(sink.Submit(std::move(copy)).admission == Admission::kAccepted);
  REQUIRE(sink.Drain().uploaded == 1);
  ColdOps ops(s3, kPrefix, {"acme"}, TestKeys());
  PurgeReport p = ops.PurgeTenant("acme", 100, kNow);
  CHECK_FALSE(p.error);
  CHECK_FALSE(p.complete);
  REQUIRE(p.kept.size() == 1);
  CHECK(p.kept[0].find(mixed.manifest_key) == 0);
  CHECK(s3.Objects().count(mixed.object_key) == 1);
  // An admin's reclaim of it finishes the purge.
  REQUIRE_FALSE(ops.Reclaim(mixed.manifest_digest, kNow, Principal{.admin = true}).refused);
  PurgeReport again = ops.PurgeTenant("acme", 100, kNow);
  CHECK(again.complete);
  CHECK(s3.Objects().count(mixed.object_key) == 0);
}

}  // namespace gpucache::cold
