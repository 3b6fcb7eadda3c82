// Known places (cold/known_places.h): the bounded table of where this node knows blocks to be,
// and the one-GET refill through it over an in-memory object store. The same behaviour against
// the real gateway: cold_known_places_test.cc.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "cold/control.h"
#include "cold/known_places.h"
#include "cold/locator.h"
#include "cold/manifest.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

namespace {

KnownPlace PlaceOf(uint8_t seed) {
  KnownPlace p;
  p.range.object_digest.fill(seed);
  p.range.offset = seed;
  p.range.length = 100;
  p.manifest_digest.fill(static_cast<uint8_t>(seed + 1));
  return p;
}

BlockAddress Addr(int i, std::string tenant = "acme") { return AddressOf(NthIdentity(i, std::move(tenant))); }

const Principal kAdmin{.uid = 0, .gid = 0, .admin = true};

struct Tier {
  MemoryStore hot;
  MemoryObjectStore s3;
  std::unique_ptr<ColdTier> tier;
  explicit Tier(WriteBack write_back = WriteBack::kManual) {
    ColdTierOptions o;
    o.prefix = kPrefix;
    o.write_back = write_back;
    o.flush_interval_ms = 3'600'000;  // write-back rounds only when a test runs one
    o.sink.redrive_interval_ms = 0;
    tier = std::make_unique<ColdTier>(hot, s3, o, TestKeys());
  }
  json Ctl(const json& req) { return json::parse(HandleColdRequest(*tier, kAdmin, req.dump())); }
  json Refill(int i) {
    return Ctl({{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(NthIdentity(i)))}});
  }
  uint64_t Requests() { return tier->Stats().requests; }
};

}  // namespace

TEST_CASE("Known places: bounded, the least recently used goes first") {
  KnownPlaces k(2);
  k.Remember(Addr(0), PlaceOf(1));
  k.Remember(Addr(1), PlaceOf(2));
  REQUIRE(k.Find(Addr(0)));  // 0 is now the most recent
  k.Remember(Addr(2), PlaceOf(3));
  CHECK(k.size() == 2);
  CHECK(k.Find(Addr(0)));
  CHECK_FALSE(k.Find(Addr(1)));
  CHECK(k.Find(Addr(2))->range.offset == 3);
  k.Remember(Addr(2), PlaceOf(4));  // replaced, not added
  CHECK(k.size() == 2);
  CHECK(k.Find(Addr(2))->range.offset == 4);
}

TEST_CASE("Known places: keyed by the full address, tenant included") {
  KnownPlaces k(16);
  k.Remember(Addr(0, "acme"), PlaceOf(1));
  BlockAddress other = Addr(0, "acme");
  other.tenant = "globex";  // the same namespace and block names under another tenant
  CHECK_FALSE(k.Find(other));
  CHECK_FALSE(k.Find(Addr(0, "globex")));
  CHECK(k.Find(Addr(0, "acme")));
}

TEST_CASE("Known places: forgotten by block, by manifest, by tenant, and capacity 0 keeps none") {
  KnownPlaces k(16);
  k.Remember(Addr(0), PlaceOf(1));
  k.Remember(Addr(1), PlaceOf(1));
  k.Remember(Addr(2), PlaceOf(5));
  k.Remember(Addr(0, "globex"), PlaceOf(5));
  k.Forget(Addr(2));
  CHECK_FALSE(k.Find(Addr(2)));
  CHECK(k.ForgetManifest(PlaceOf(1).manifest_digest) == 2);
  CHECK(k.size() == 1);
  CHECK(k.ForgetTenant("globex") == 1);
  CHECK(k.size() == 0);
  KnownPlaces off(0);
  off.Remember(Addr(0), PlaceOf(1));
  CHECK_FALSE(off.Find(Addr(0)));
}

TEST_CASE("Known places: a block this tier packed refills with one GET, one it refilled too") {
  Tier t;
  REQUIRE(CommitBlock(t.hot, NthIdentity(0), PayloadOf(0, 5000)) == StatusCode::kOk);
  REQUIRE(t.Ctl({{"op", "cold.pack"}})["complete"] == true);
  REQUIRE(t.hot.Evict(Addr(0)) == StatusCode::kOk);
  t.s3.ClearLog();
  uint64_t before = t.Requests();
  CHECK(t.Refill(0)["result"] == "hit");
  CHECK(t.Requests() - before == 1);
  REQUIRE(t.s3.Log().size() == 1);
  CHECK(t.tier->Stats().refill_known == 1);

  // Another tier on the same bucket learns the place from the locator it verified.
  MemoryStore hot2;
  ColdTierOptions o;
  o.prefix = kPrefix;
  o.write_back = WriteBack::kManual;
  ColdTier other(hot2, t.s3, o, TestKeys());
  std::string id = HexEncode(EncodePhysicalKey(NthIdentity(0)));
  auto refill = [&] {
    return json::parse(HandleColdRequest(other, kAdmin, json{{"op", "cold.refill"}, {"identity", id}}.dump()));
  };
  CHECK(refill()["result"] == "hit");
  CHECK(other.Stats().requests == 2);
  REQUIRE(hot2.Evict(Addr(0)) == StatusCode::kOk);
  CHECK(refill()["result"] == "hit");
  CHECK(other.Stats().requests == 3);
  CHECK(other.Stats().refill_known == 1);
}

// Review (2026-12-07): under accept_unsealed a refill through a v1 locator and a v3 manifest
// (anyone who can write the bucket can forge both) was remembered as a known place, which the
// docs promise only of a verified seal or of this node's own uploads.
TEST_CASE("Known places: a refill through an unsealed locator teaches no place") {
  MemoryStore hot;
  MemoryObjectStore s3;
  ColdTierOptions o;
  o.prefix = kPrefix;
  o.write_back = WriteBack::kManual;
  o.accept_unsealed = true;
  ColdTier tier(hot, s3, o, TestKeys());
  PackedPair p = MakePack(0, 1);
  Manifest v3 = p.decoded;
  v3.seals.clear();
  std::vector<uint8_t> manifest = EncodeManifest(v3);
  s3.Set(p.object_key, p.object);
  s3.Set(ManifestKey(kPrefix, ComputeSha256(manifest)), manifest);
  s3.Set(LocatorKey(kPrefix, Addr(0)), EncodeLegacyLocator(ComputeSha256(manifest)));
  std::string id = HexEncode(EncodePhysicalKey(NthIdentity(0)));
  json r = json::parse(HandleColdRequest(tier, kAdmin, json{{"op", "cold.refill"}, {"identity", id}}.dump()));
  REQUIRE(r["result"] == "hit");  // the documented rule: accept_unsealed serves them
  CHECK(tier.Stats().known_places == 0);
}

TEST_CASE("Known places: a pack with other bytes at the known key falls back and commits nothing") {
  Tier t;
  REQUIRE(CommitBlock(t.hot, NthIdentity(0), PayloadOf(0, 5000)) == StatusCode::kOk);
  REQUIRE(t.Ctl({{"op", "cold.pack"}})["complete"] == true);
  std::string pack_key;
  std::vector<uint8_t> good;
  for (auto& [key, bytes] : t.s3.Objects()) {
    if (key.find("/packs/") != std::string::npos) pack_key = key, good = bytes;
  }
  std::vector<uint8_t> bad = good;
  bad[bad.size() - 3] ^= 0x40;
  t.s3.Set(pack_key, bad);
  REQUIRE(t.hot.Evict(Addr(0)) == StatusCode::kOk);
  uint64_t before = t.Requests();
  json r = t.Refill(0);
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "corrupt");
  CHECK(t.Requests() - before == 3);  // the known range, then the locator and its range
  CHECK_FALSE(t.hot.Stat(Addr(0)).ok());
  CHECK(t.tier->Stats().refill_known_fallbacks == 1);
  CHECK(t.tier->Stats().known_places == 0);
  t.s3.Set(pack_key, good);
  before = t.Requests();
  CHECK(t.Refill(0)["result"] == "hit");
  CHECK(t.Requests() - before == 2);  // the place was forgotten: the locator decided
}

TEST_CASE("Known places: a reclaim on this node forgets the places its manifest listed") {
  Tier t;
  REQUIRE(CommitBlock(t.hot, NthIdentity(0), PayloadOf(0, 5000)) == StatusCode::kOk);
  REQUIRE(t.Ctl({{"op", "cold.pack"}})["complete"] == true);
  REQUIRE(t.tier->Stats().known_places == 1);
  std::string manifest;
  for (auto& [key, bytes] : t.s3.Objects()) {
    if (key.find("/manifests/") != std::string::npos) manifest = key.substr(key.rfind('/') + 1);
  }
  REQUIRE(t.Ctl({{"op", "cold.reclaim"}, {"manifest", manifest}})["ok"] == true);
  CHECK(t.tier->Stats().known_places == 0);
  REQUIRE(t.hot.Evict(Addr(0)) == StatusCode::kOk);
  uint64_t before = t.Requests();
  CHECK(t.Refill(0)["result"] == "missing");
  CHECK(t.Requests() - before == 1);  // the locator only: no GET of a reclaimed pack
}

TEST_CASE("Known places: after-commit write-back does not upload a block it just refilled") {
  Tier t(WriteBack::kAfterCommit);
  t.hot.SetCommitObserver([&](const BlockAddress& a) { t.tier->OnCommitted(a); });
  REQUIRE(CommitBlock(t.hot, NthIdentity(0), PayloadOf(0, 5000)) == StatusCode::kOk);
  t.tier->PackQueued();
  REQUIRE(t.tier->DrainNow().uploaded == 1);
  REQUIRE(t.hot.Evict(Addr(0)) == StatusCode::kOk);
  REQUIRE(t.Refill(0)["result"] == "hit");
  t.tier->PackQueued();
  CHECK(t.tier->Stats().packed_blocks == 1);
  CHECK(t.tier->Stats().sink.submitted == 1);
}

}  // namespace gpucache::cold
