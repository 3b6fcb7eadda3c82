#include "cold/ops.h"

#include <doctest/doctest.h>

#include <vector>

#include "cold/locator.h"
#include "store/block_file.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/sink_test_util.h"
#include "tests/support/fault_env.h"
#include "tests/support/memory_object_store.h"
#include "tests/support/temp_dir.h"

namespace gpucache::cold {
using namespace testing;

namespace {

constexpr uint64_t kNow = 2'000'000'000'000'000'000ull;

const Principal kAdmin{.admin = true};

}  // namespace

TEST_CASE("ColdOps: reclaim deletes locators, manifest and object, each confirmed by HEAD") {
  MemoryObjectStore s3;
  PackedPair p = Uploaded(s3, MakePack(0, 3));
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  ReclaimReport r = ops.Reclaim(p.manifest_digest, kNow, kAdmin);
  CHECK_FALSE(r.refused);
  CHECK_FALSE(r.error);
  CHECK(r.deleted.size() == 5);  // 3 locators, the manifest, the object
  CHECK(s3.Objects().empty());
  size_t deletes = 0;
  auto log = s3.Log();
  for (size_t i = 0; i < log.size(); i++) {
    if (log[i].verb != "DELETE") continue;
    deletes++;
    REQUIRE(i + 1 < log.size());
    CHECK(log[i + 1].verb == "HEAD");
    CHECK(log[i + 1].key == log[i].key);
  }
  CHECK(deletes == 5);
}

TEST_CASE("ColdOps: an object another manifest references is kept, so is a newer locator") {
  MemoryObjectStore s3;
  PackedPair old = Uploaded(s3, MakePack(0, 2));
  // The same object under a second manifest (another creation time): a live reference.
  Manifest twin = old.decoded;
  twin.created_unix_ns += 1;
  SealManifest(twin, *TestKeyring());
  Sha256 td = ManifestDigest(twin);
  s3.Set(ManifestKey(kPrefix, td), EncodeManifest(twin));
  // Block 1 was repacked later: its locator names the newer manifest.
  s3.Set(LocatorKey(kPrefix, old.decoded.entries[1].address),
         EncodeLocator(SealedLocator(twin, td, twin.entries[1], *TestKeyring())));
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  ReclaimReport r = ops.Reclaim(old.manifest_digest, kNow, kAdmin);
  CHECK_FALSE(r.refused);
  auto objects = s3.Objects();
  CHECK(objects.count(old.object_key) == 1);
  CHECK(objects.count(old.manifest_key) == 0);
  CHECK(objects.count(LocatorKey(kPrefix, old.decoded.entries[0].address)) == 0);
  CHECK(objects.count(LocatorKey(kPrefix, old.decoded.entries[1].address)) == 1);
  CHECK(r.kept.size() == 2);
}

// Review of stop 44: with the reference settled before the manifest goes, two reclaims of two
// manifests naming one object could each see the other and keep the object, left with nothing
// naming it. Asked again once its own manifest is gone, the last of the two sees neither.
TEST_CASE("ColdOps: an object whose other manifest goes during the reclaim goes too") {
  MemoryObjectStore s3;
  PackedPair old = Uploaded(s3, MakePack(0, 2));
  Manifest twin = old.decoded;  // the same object under a second manifest
  twin.created_unix_ns += 1;
  SealManifest(twin, *TestKeyring());
  const std::string twin_key = ManifestKey(kPrefix, ManifestDigest(twin));
  s3.Set(twin_key, EncodeManifest(twin));
  class OtherGoesToo final : public ForwardingObjectStore {
   public:
    OtherGoesToo(ObjectStore& inner, std::string mine, std::string other)
        : ForwardingObjectStore(inner), mine_(std::move(mine)), other_(std::move(other)) {}
    ObjectResult<Done> Delete(std::string_view key) override {
      if (key == mine_ && !other_.empty()) {  // the other reclaim's delete lands first
        (void)inner_.Delete(other_);
        other_.clear();
      }
      return inner_.Delete(key);
    }
   private:
    std::string mine_, other_;
  } racing(s3, old.manifest_key, twin_key);
  ColdOps ops(racing, kPrefix, {}, TestKeys());
  ReclaimReport r = ops.Reclaim(old.manifest_digest, kNow, kAdmin);
  CHECK_FALSE(r.refused);
  CHECK_FALSE(r.error);
  CHECK(s3.Objects().count(old.object_key) == 0);
}

TEST_CASE("ColdOps: retention, legacy manifests and non-owners are refused, changing nothing") {
  MemoryObjectStore s3;
  PackedPair p = Uploaded(s3, MakePack(0, 1));
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  REQUIRE(ops.RecordRetention(p.manifest_digest, kNow + 1).ok());
  CHECK(ops.RetentionOf(p.manifest_digest).value() == kNow + 1);
  auto before = s3.Objects();
  ReclaimReport kept = ops.Reclaim(p.manifest_digest, kNow, kAdmin);
  CHECK(kept.refused);
  CHECK(s3.Objects() == before);
  Principal globex{.tenants = {"globex"}};
  ReclaimReport stranger = ops.Reclaim(p.manifest_digest, kNow + 2, globex);
  CHECK(stranger.refused);
  CHECK(s3.Objects() == before);
  // Regression (review, 2026-12-06): under retention a stranger was told "retained until T",
  // and past it "not an owner of tenant acme": whose blocks, and for how long. Ownership is
  // checked first, and the refusal names neither.
  bool allowed = false;
  ReclaimReport early = ops.Reclaim(p.manifest_digest, kNow, globex, [&](const std::string&) {
    allowed = true;
    return std::string();
  });
  CHECK(early.refused);
  CHECK(early.reason.rfind("not an owner", 0) == 0);
  CHECK(early.reason.find("acme") == std::string::npos);
  CHECK_FALSE(allowed);
  std::vector<uint8_t> legacy = p.manifest;
  legacy[4] = 2;
  Sha256 ld = ComputeSha256(legacy);
  s3.Set(ManifestKey(kPrefix, ld), legacy);
  CHECK(ops.Reclaim(ld, kNow + 2, kAdmin).refused);
  CHECK(s3.Count("DELETE") == 0);
  // Past retention, by an owner: the legacy manifest (whose object is not known) keeps the
  // object, and the manifest stays with it so that the reclaim can be run again. Review of
  // stop 44: the manifest went first, and the object was left with nothing naming it, for
  // good. Review of 2026-12-07: the locators went first, and the blocks lost their cold copies
  // while the bucket kept their bytes; now nothing is deleted.
  Principal acme{.tenants = {"acme"}};
  ReclaimReport blocked = ops.Reclaim(p.manifest_digest, kNow + 2, acme);
  CHECK_FALSE(blocked.refused);
  CHECK(blocked.error.has_value());  // said, not answered as done
  CHECK(s3.Objects().count(LocatorKey(kPrefix, p.decoded.entries[0].address)) == 1);
  CHECK(blocked.deleted.empty());
  CHECK(s3.Objects().count(p.manifest_key) == 1);
  CHECK(s3.Objects().count(p.object_key) == 1);
  // Once the legacy manifest is gone, the same reclaim finishes.
  REQUIRE(s3.Delete(ManifestKey(kPrefix, ld)).ok());
  ReclaimReport done = ops.Reclaim(p.manifest_digest, kNow + 2, acme);
  CHECK_FALSE(done.refused);
  CHECK(s3.Objects().count(p.manifest_key) == 0);
  CHECK(s3.Objects().count(p.object_key) == 0);
}

// Review (2026-12-07): any object under manifests/ that did not decode (a stray upload, a tool's
// marker) stopped every reclaim, though no refill can reach an object whose key names no
// manifest.
TEST_CASE("ColdOps: an object under manifests/ whose key names no manifest does not hold up a reclaim") {
  MemoryObjectStore s3;
  PackedPair p = Uploaded(s3, MakePack(0, 1));
  s3.Set(std::string(kPrefix) + "manifests/README", std::vector<uint8_t>{'h', 'i'});
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  ReclaimReport r = ops.Reclaim(p.manifest_digest, kNow, kAdmin);
  CHECK_FALSE(r.refused);
  CHECK_FALSE(r.error);
  CHECK(s3.Objects().count(p.object_key) == 0);
  CHECK(s3.Objects().count(std::string(kPrefix) + "manifests/README") == 1);
}

// Review of stop 44: a tenant's purge deleted every key the object store's listing of
// locators/<tenant>/ returned, so a faulty or tampered listing (or an S3-compatible store that
// ignores the prefix) had it delete other tenants' locators and packs.
TEST_CASE("ColdOps: a purge deletes only the tenant's own locator keys, whatever the listing says") {
  MemoryObjectStore s3;
  PackedPair acme = Uploaded(s3, MakePack(0, 2));
  PackedPair globex = Uploaded(s3, MakePack(10, 2, 4096, "globex"));
  const std::string foreign_locator = LocatorKey(kPrefix, globex.decoded.entries[0].address);
  class ListsMore final : public ForwardingObjectStore {
   public:
    ListsMore(ObjectStore& inner, std::vector<std::string> extra)
        : ForwardingObjectStore(inner), extra_(std::move(extra)) {}
    ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override {
      auto listed = inner_.List(prefix);
      if (listed.ok() && std::string_view(prefix).find("/locators/") != std::string_view::npos) {
        for (const std::string& k : extra_) listed.value().push_back(ObjectMeta{.key = k, .size = 1});
      }
      return listed;
    }
   private:
    std::vector<std::string> extra_;
  } hostile(s3, {foreign_locator, globex.object_key, globex.manifest_key,
                 std::string(kPrefix) + "locators/acme/../globex/x"});
  // The tenant's blocks have no manifest left: only locators remain for the purge to delete.
  REQUIRE(s3.Delete(acme.manifest_key).ok());
  ColdOps ops(hostile, kPrefix, {"acme"}, TestKeys());
  PurgeReport r = ops.PurgeTenant("acme", 100, kNow);
  CHECK_FALSE(r.refused);
  CHECK_FALSE(r.error);
  CHECK(r.locators_deleted == 2);
  auto objects = s3.Objects();
  CHECK(objects.count(foreign_locator) == 1);
  CHECK(objects.count(globex.object_key) == 1);
  CHECK(objects.count(globex.manifest_key) == 1);
  CHECK(objects.count(LocatorKey(kPrefix, acme.decoded.entries[0].address)) == 0);
}

// Review of stop 44: the purge's budget counted refused reclaims, so a retired tenant whose
// first manifests (in listing order) were retained had every call spend its budget on them
// and return before the rest: gpucachectl, seeing nothing deleted, gave up.
TEST_CASE("ColdOps: a purge's budget is spent on manifests reclaimed, not on refused ones") {
  MemoryObjectStore s3;
  PackedPair a = Uploaded(s3, MakePack(0, 1));
  PackedPair b = Uploaded(s3, MakePack(1, 1));
  const bool a_first = a.manifest_key < b.manifest_key;
  const PackedPair& retained = a_first ? a : b;
  const PackedPair& other = a_first ? b : a;
  ColdOps ops(s3, kPrefix, {"acme"}, TestKeys());
  REQUIRE(ops.RecordRetention(retained.manifest_digest, kNow + 1000).ok());
  PurgeReport r = ops.PurgeTenant("acme", 1, kNow);
  CHECK_FALSE(r.error);
  CHECK(r.manifests_deleted == 1);
  CHECK(s3.Objects().count(other.manifest_key) == 0);
  CHECK(s3.Objects().count(retained.manifest_key) == 1);
}

TEST_CASE("ColdOps: backfill enqueues committed blocks and stops at the byte budget") {
  MemoryObjectStore s3;
  MemoryStore hot;
  for (int i = 0; i < 10; i++) {
    REQUIRE(CommitBlock(hot, NthIdentity(i), test::Payload(1000, i)) == StatusCode::kOk);
  }
  REQUIRE(CommitBlock(hot, NthIdentity(0, "oldco"), test::Payload(1000, 0)) == StatusCode::kOk);
  ColdOps ops(s3, kPrefix, {"oldco"}, TestKeys());
  Sink sink(s3, kPrefix, {});
  PackOptions pack;
  pack.max_blocks = 2;
  BackfillReport r = ops.Backfill(hot, sink, "", 4500, pack);
  CHECK(r.blocks == 4);
  CHECK(r.bytes == 4000);
  CHECK(r.budget_reached);
  CHECK(r.packs == 2);
  sink.Drain();
  BackfillReport rest = ops.Backfill(hot, sink, "", 1 << 20, pack);
  CHECK(rest.skipped_cold == 4);
  CHECK(rest.blocks == 6);  // the retired tenant's block is never packed
  CHECK_FALSE(rest.budget_reached);
  sink.Drain();
  Refiller refiller(s3, kPrefix, {"oldco"}, TestKeys());
  Principal acme{.tenants = {"acme"}};
  for (int i = 0; i < 10; i++) {
    RefillOutcome o = refiller.Fetch(acme, EncodePhysicalKey(NthIdentity(i)), 1 << 20);
    REQUIRE(o.status == RefillStatus::kHit);
    CHECK(o.payload == test::Payload(1000, i));
  }
}

// Block i of many (NthIdentity's chains lengthen past a few thousand): i in the chain's bytes.
CacheIdentity Many(int i) {
  CacheIdentity id = test::SampleIdentity("acme");
  for (int b = 0; b < 4; b++) id.chain[1][b] = static_cast<uint8_t>(i >> (8 * b));
  return id;
}

TEST_CASE("ColdOps: backfill counts a block once when it leaves and comes back during the pass") {
  MemoryObjectStore s3;
  MemoryStore hot;
  // More blocks than the store's pass takes in one slice (16,384), so that a block committed
  // during the pass lands past the slice being visited.
  constexpr int kBlocks = 16385;
  for (int i = 0; i < kBlocks; i++) {
    REQUIRE(CommitBlock(hot, Many(i), test::Payload(100, i)) == StatusCode::kOk);
  }
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  Sink sink(s3, kPrefix, {});
  PackOptions pack;
  pack.max_blocks = 1 << 20;
  pack.target_bytes = 1 << 30;
  // At the first block packed: it is invalidated, another block takes its place in the index,
  // and it is committed again (at the end of the index): the pass meets it a second time.
  bool once = false;
  BackfillReport r = ops.Backfill(hot, sink, "", 1ull << 30, pack, [&](const BackfillReport&) {
    if (std::exchange(once, true)) return;
    REQUIRE(hot.Invalidate(AddressOf(Many(0))) == StatusCode::kOk);
    REQUIRE(CommitBlock(hot, Many(kBlocks), test::Payload(100, 1)) == StatusCode::kOk);
    REQUIRE(CommitBlock(hot, Many(0), test::Payload(100, 0)) == StatusCode::kOk);
  });
  REQUIRE(once);
  CHECK(r.blocks == kBlocks);
  CHECK(r.bytes == kBlocks * 100ull);
  CHECK(r.packs + r.refused == 1);  // one pack built (whether the sink had room is not the point)
}

// Regression: a block whose payload a pack could not read (EIO from its data directory) was
// skipped with nothing said: the pack is the only reader of a block no client reads again, so a
// failing device showed in no gpucache_backing_errors_total{op="read"} and no log line.
TEST_CASE("ColdOps: a block a pack cannot read is a backing read error the store counts and reports with its data directory") {
  test::TempDir tmp;
  test::FaultEnv env;
  StoreOptions options;
  options.env = &env;
  std::string error;
  std::unique_ptr<IndexedStore> hot = OpenFileStore(tmp.path() + "/data", options, nullptr, &error);
  REQUIRE_MESSAGE(hot, error);
  const BlockAddress a = AddressOf(NthIdentity(0));
  REQUIRE(CommitBlock(*hot, NthIdentity(0), test::Payload(5000)) == StatusCode::kOk);
  std::vector<BlockLocation> told;
  hot->SetBackingReadErrorObserver([&](const BackingReadError& e) {
    CHECK(e.address.RelativePath() == a.RelativePath());
    told.push_back(e.where);
  });
  PackBuilder builder(kPrefix, TestKeyring());
  env.FailNextReadFrom(kBlockDataOffset, test::FaultEnv::Fault::kIoError);  // the payload's read
  CHECK(ColdOps::AddBlock(*hot, a, builder) == StatusCode::kIoError);
  CHECK(builder.count() == 0);
  CHECK(hot->Stats().read_errors == 1);
  REQUIRE(told.size() == 1);
  CHECK(told[0].data_dir == tmp.path() + "/data");
  CHECK(told[0].file.ends_with(a.RelativePath()));
}

}  // namespace gpucache::cold
