#include "cold/refill.h"

#include <doctest/doctest.h>

#include "cold/locator.h"
#include "cold/ops.h"
#include "cold/sink.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {

struct Fixture {
  MemoryObjectStore s3;
  PackedPair pack = MakePack(0, 4, 10000);
  Refiller refiller{s3, kPrefix, {"oldco"}, TestKeys()};
  Principal acme{.tenants = {"acme"}};
  Fixture() {
    Sink sink(s3, kPrefix, {});
    PackedPair copy = pack;
    REQUIRE(sink.Submit(std::move(copy)).admission == Admission::kAccepted);
    REQUIRE(sink.Drain().uploaded == 1);
    s3.ClearLog();
  }
  Bytes Gpck(int i, std::string tenant = "acme") { return EncodePhysicalKey(NthIdentity(i, tenant)); }
};

}  // namespace

TEST_CASE("Refill: a packed block comes back byte-identical") {
  Fixture f;
  RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(2), 1 << 20);
  REQUIRE(o.status == RefillStatus::kHit);
  CHECK(o.payload == PayloadOf(2, 10000));
  CHECK(o.address == AddressOf(NthIdentity(2)));
}

TEST_CASE("Refill: a wrong tenant is refused before any request") {
  Fixture f;
  Principal globex{.tenants = {"globex"}};
  CHECK(f.refiller.Fetch(globex, f.Gpck(1), 1 << 20).status == RefillStatus::kWrongTenant);
  CHECK(f.s3.Log().empty());
  Principal both{.tenants = {"acme", "oldco"}};
  CHECK(f.refiller.Fetch(both, f.Gpck(1, "oldco"), 1 << 20).status == RefillStatus::kRetired);
  CHECK(f.refiller.Fetch(f.acme, Bytes{1, 2, 3}, 1 << 20).status == RefillStatus::kInvalid);
  CHECK(f.s3.Log().empty());
}

TEST_CASE("Refill: an identity mismatch is Missing without downloading the payload") {
  Fixture f;
  auto keyring = TestKeyring();
  const Keyring& keys = *keyring;
  CacheIdentity other = NthIdentity(1);
  other.valid_length -= 1;  // a per-block field not in the address: same path, other identity
  REQUIRE(AddressOf(other) != AddressOf(NthIdentity(1)));  // guard: addresses cover it
  // A validly sealed locator at the other identity's address naming block 1's range.
  Locator l = SealedLocator(f.pack.decoded, f.pack.manifest_digest, f.pack.decoded.entries[1], keys);
  l.address = AddressOf(other);
  SealLocator(l, keys);
  f.s3.Set(LocatorKey(kPrefix, AddressOf(other)), EncodeLocator(l));
  RefillOutcome o = f.refiller.Fetch(f.acme, EncodePhysicalKey(other), 1 << 20);
  CHECK(o.status == RefillStatus::kMissing);
  CHECK(o.reason == MissingReason::kIdentityMismatch);
  CHECK(f.s3.Count("GETRANGE") == 0);

  // The right address, sealed, but binding another identity's digest.
  Locator m = SealedLocator(f.pack.decoded, f.pack.manifest_digest, f.pack.decoded.entries[1], keys);
  m.identity_digest = ComputeSha256(f.Gpck(3));
  SealLocator(m, keys);
  f.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(1))), EncodeLocator(m));
  RefillOutcome mismatch = f.refiller.Fetch(f.acme, f.Gpck(1), 1 << 20);
  CHECK(mismatch.status == RefillStatus::kMissing);
  CHECK(mismatch.reason == MissingReason::kIdentityMismatch);
  CHECK(f.s3.Count("GETRANGE") == 0);
}

TEST_CASE("Refill: a v2 locator makes a refill two GETs, no manifest read") {
  Fixture f;
  REQUIRE(f.refiller.Fetch(f.acme, f.Gpck(1), 1 << 20).status == RefillStatus::kHit);
  CHECK(f.s3.Count("GET") == 1);
  CHECK(f.s3.Count("GETRANGE") == 1);
  for (const auto& r : f.s3.Log()) CHECK(r.key.find("/manifests/") == std::string::npos);
}

TEST_CASE("Refill: v1 locators are unsealed, under accept_unsealed legacy manifests stay Missing") {
  Fixture f;
  Refiller lenient{f.s3, kPrefix, {}, TestKeys(), /*accept_unsealed=*/true};
  for (uint8_t v : {1, 2}) {
    std::vector<uint8_t> legacy = f.pack.manifest;
    legacy[4] = v;
    Sha256 d = ComputeSha256(legacy);
    f.s3.Set(ManifestKey(kPrefix, d), legacy);
    f.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(0))), EncodeLegacyLocator(d));
    RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(0), 1 << 20);
    CHECK(o.status == RefillStatus::kMissing);
    CHECK(o.reason == MissingReason::kUnsealed);
    RefillOutcome l = lenient.Fetch(f.acme, f.Gpck(0), 1 << 20);
    CHECK(l.reason == MissingReason::kLegacyManifest);
  }
  CHECK(f.s3.Count("GETRANGE") == 0);
  CHECK(f.refiller.seal_refusals().unsealed == 2);
}

TEST_CASE("Refill: the byte budget is honoured without downloading") {
  Fixture f;
  RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(0), 9999);
  CHECK(o.reason == MissingReason::kOverBudget);
  CHECK(f.s3.Count("GETRANGE") == 0);
  CHECK(f.refiller.Fetch(f.acme, f.Gpck(0), 10000).status == RefillStatus::kHit);
}

TEST_CASE("Refill: corrupt bytes never become a hit") {
  Fixture f;
  auto objects = f.s3.Objects();
  std::vector<uint8_t> object = objects.at(f.pack.object_key);
  object[f.pack.decoded.entries[2].offset + 77] ^= 0x10;
  f.s3.Set(f.pack.object_key, object);
  RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(2), 1 << 20);
  CHECK(o.status == RefillStatus::kMissing);
  CHECK(o.reason == MissingReason::kCorrupt);
  CHECK(o.payload.empty());
  // A locator with one bit flipped (inside its identity digest, so it still decodes) is
  // caught by its seal.
  std::string lkey = LocatorKey(kPrefix, AddressOf(NthIdentity(1)));
  std::vector<uint8_t> loc = objects.at(lkey);
  loc[loc.size() - 40] ^= 1;
  f.s3.Set(lkey, loc);
  CHECK(f.refiller.Fetch(f.acme, f.Gpck(1), 1 << 20).reason == MissingReason::kBadSeal);
}

TEST_CASE("Refill: an unavailable object store is Missing and the hot store is untouched") {
  Fixture f;
  f.s3.SetFault([](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
    return ObjectError{ObjectErrorKind::kTemporary, 0, "COULDNT_CONNECT", "", false};
  });
  MemoryStore hot;
  RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(0), 1 << 20);
  CHECK(o.status == RefillStatus::kMissing);
  CHECK(o.reason == MissingReason::kUnavailable);
  CHECK(hot.Stats().tenants.empty());
}

TEST_CASE("Refill: CommitRefill enters the hot store through the commit path") {
  Fixture f;
  MemoryStore hot;
  RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(3), 1 << 20);
  REQUIRE(o.status == RefillStatus::kHit);
  CHECK(CommitRefill(hot, {1000, 1000}, f.Gpck(3), o.payload) == StatusCode::kOk);
  Result<BlockInfo> info = hot.Stat(o.address);
  REQUIRE(info.ok());
  CHECK(info->size == 10000);
  CHECK(ChecksumFromText(info->checksum) == f.pack.decoded.entries[3].checksum);
  CHECK(CommitRefill(hot, {1000, 1000}, f.Gpck(3), o.payload) == StatusCode::kExists);
  // Limits apply as to any fill.
  StoreOptions tight;
  tight.limits.global.max_block_bytes = 100;
  MemoryStore small(tight);
  CHECK(CommitRefill(small, {1000, 1000}, f.Gpck(3), o.payload) != StatusCode::kOk);
  CHECK_FALSE(small.Stat(o.address).ok());
}


// Review (2026-12-07): a refill's fill was its caller's `.part` too: the caller reopened it while
// the download ran and wrote into it, and the refill committed those bytes and answered "hit".
// The refill's reservation is the daemon's: no caller, not even an admin, may act on it.
TEST_CASE("Refill: the fill a refill writes is no caller's .part") {
  Fixture f;
  MemoryStore hot;
  const BlockAddress a = AddressOf(NthIdentity(3));
  Result<ReservationId> rid = BeginRefill(hot, {1000, 1000}, f.Gpck(3));
  REQUIRE(rid.ok());
  CHECK(hot.FillFor(a, uint32_t{1000}).status() == StatusCode::kBusy);  // its owner's open
  CHECK(hot.FillFor(a, std::nullopt).status() == StatusCode::kBusy);    // an admin's
  CHECK(FinishRefill(hot, rid.value(), /*verified=*/false) == StatusCode::kChecksumMismatch);
}

}  // namespace gpucache::cold
