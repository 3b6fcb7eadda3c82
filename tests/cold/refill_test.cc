#include "cold/refill.h"

#include <doctest/doctest.h>

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
  Refiller refiller{s3, kPrefix, {"oldco"}};
  Authorization acme{{"acme"}, false};
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
  Authorization globex{{"globex"}, false};
  CHECK(f.refiller.Fetch(globex, f.Gpck(1), 1 << 20).status == RefillStatus::kWrongTenant);
  CHECK(f.s3.Log().empty());
  Authorization both{{"acme", "oldco"}, false};
  CHECK(f.refiller.Fetch(both, f.Gpck(1, "oldco"), 1 << 20).status == RefillStatus::kRetired);
  CHECK(f.refiller.Fetch(f.acme, Bytes{1, 2, 3}, 1 << 20).status == RefillStatus::kInvalid);
  CHECK(f.s3.Log().empty());
}

TEST_CASE("Refill: an identity mismatch is Missing without downloading the payload") {
  Fixture f;
  CacheIdentity other = NthIdentity(1);
  other.valid_length -= 1;  // a per-block field not in the address: same path, other identity
  REQUIRE(AddressOf(other) != AddressOf(NthIdentity(1)));  // guard: addresses cover it
  // Forge a locator for the other identity's address that points at the real manifest.
  f.s3.Set(LocatorKey(kPrefix, AddressOf(other)), EncodeLocator(f.pack.manifest_digest));
  RefillOutcome o = f.refiller.Fetch(f.acme, EncodePhysicalKey(other), 1 << 20);
  CHECK(o.status == RefillStatus::kMissing);
  CHECK(f.s3.Count("GETRANGE") == 0);

  // The same address with a manifest entry whose identity digest is another's.
  Manifest m = f.pack.decoded;
  m.entries[1].identity_digest = ComputeSha256(f.Gpck(3));
  std::vector<uint8_t> forged = EncodeManifest(m);
  Sha256 fd = ComputeSha256(forged);
  f.s3.Set(ManifestKey(kPrefix, fd), forged);
  f.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(1))), EncodeLocator(fd));
  RefillOutcome mismatch = f.refiller.Fetch(f.acme, f.Gpck(1), 1 << 20);
  CHECK(mismatch.status == RefillStatus::kMissing);
  CHECK(mismatch.reason == MissingReason::kIdentityMismatch);
  CHECK(f.s3.Count("GETRANGE") == 0);
}

TEST_CASE("Refill: legacy v1/v2 manifests are Missing with no payload download") {
  Fixture f;
  for (uint8_t v : {1, 2}) {
    std::vector<uint8_t> legacy = f.pack.manifest;
    legacy[4] = v;
    Sha256 d = ComputeSha256(legacy);
    f.s3.Set(ManifestKey(kPrefix, d), legacy);
    f.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(0))), EncodeLocator(d));
    RefillOutcome o = f.refiller.Fetch(f.acme, f.Gpck(0), 1 << 20);
    CHECK(o.status == RefillStatus::kMissing);
    CHECK(o.reason == MissingReason::kLegacyManifest);
  }
  CHECK(f.s3.Count("GETRANGE") == 0);
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
  // A manifest replaced under its key is caught by its content address.
  std::vector<uint8_t> m = objects.at(f.pack.manifest_key);
  m.back() ^= 1;
  f.s3.Set(f.pack.manifest_key, m);
  CHECK(f.refiller.Fetch(f.acme, f.Gpck(1), 1 << 20).reason == MissingReason::kCorrupt);
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

}  // namespace gpucache::cold
