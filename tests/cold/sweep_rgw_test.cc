// The orphan sweep against a real S3 server (rgw.sh): the ages it judges by are the server's
// LastModified, read from a ListObjectsV2 page and from a HEAD's header, and what it deletes is
// gone. `now` is passed in, so an hour's minimum age is tested without waiting an hour.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "cold/ops.h"
#include "cold/sink.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/rgw_env.h"

namespace gpucache::cold {
namespace {

using testing::Client;
using testing::RunPrefix;
using testing::ServerOptions;

uint64_t WallNowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

PackedPair PackOf(const std::string& prefix, int first) {
  PackBuilder b(prefix, testing::TestKeyring());
  for (int i = first; i < first + 2; i++) {
    CacheIdentity id = testing::NthIdentity(i);
    b.Add(AddressOf(id), EncodePhysicalKey(id), testing::PayloadOf(i, 4096));
  }
  return b.Build(1'700'000'000'000'000'000ull);
}

}  // namespace

TEST_CASE("Sweep rgw: ages come from the server's LastModified, an old orphan goes, a named pack stays") {
  auto options = ServerOptions();
  if (!options) return;
  auto client = Client(*options);
  const std::string prefix = RunPrefix() + "sweep/";
  PackedPair named = PackOf(prefix, 0);
  {
    Sink sink(*client, prefix, {});
    PackedPair copy = named;
    REQUIRE(sink.Submit(std::move(copy)).admission == Admission::kAccepted);
    REQUIRE(sink.Drain().uploaded == 1);
  }
  PackedPair orphan = PackOf(prefix, 10);
  REQUIRE(client->Put(orphan.object_key, orphan.object).ok());

  const uint64_t now = WallNowSeconds();
  auto listed = client->List(prefix + "packs/");
  REQUIRE(listed.ok());
  REQUIRE(listed.value().size() == 2);
  for (const ObjectMeta& m : listed.value()) {
    CAPTURE(m.key);
    CHECK(m.modified_unix_s + 600 > now);  // written just now, by the server's clock
    CHECK(m.modified_unix_s < now + 600);
  }
  auto head = client->Head(orphan.object_key);
  REQUIRE(head.ok());
  CHECK(head.value().modified_unix_s + 600 > now);
  CHECK(head.value().modified_unix_s < now + 600);

  ColdOps ops(*client, prefix, {}, testing::TestKeys());
  SweepReport young = ops.SweepOrphans(now, 3600, 100, {}, {});
  CHECK_FALSE(young.error);
  CHECK(young.young == 1);
  CHECK(young.referenced == 1);
  CHECK(young.deleted.empty());

  SweepReport later = ops.SweepOrphans(now + 2 * 3600, 3600, 100, {}, {});
  CHECK_FALSE(later.error);
  CHECK(later.referenced == 1);
  CHECK(later.deleted == std::vector<std::string>{orphan.object_key});
  CHECK(later.complete);
  auto gone = client->Head(orphan.object_key);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().kind == ObjectErrorKind::kNotFound);
  CHECK(client->Head(named.object_key).ok());

  // Through the tier, "now" is the gateway's own clock (a probe object written and asked for
  // its age, then deleted): the named pack is found and nothing young is taken.
  {
    MemoryStore hot;
    ColdTierOptions o;
    o.prefix = prefix;
    o.write_back = WriteBack::kManual;
    ColdTier tier(hot, *client, o, testing::TestKeys());
    PackedPair fresh = PackOf(prefix, 20);
    REQUIRE(client->Put(fresh.object_key, fresh.object).ok());
    // This node's clock ten hours ahead: by it the fresh orphan would be old.
    SweepReport t = tier.SweepOrphans(WallNowSeconds() + 10 * 3600, 3600, 100);
    CHECK_FALSE(t.error);
    CHECK(t.referenced == 1);
    CHECK(t.young == 1);
    CHECK(t.deleted.empty());
    CHECK(client->Head(fresh.object_key).ok());
    CHECK_FALSE(client->Head(prefix + "sweep-clock").ok());
  }
  auto all = client->List(prefix);
  REQUIRE(all.ok());
  for (const ObjectMeta& m : all.value()) CHECK(client->Delete(m.key).ok());
}

}  // namespace gpucache::cold
