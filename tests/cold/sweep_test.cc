// The orphan sweep (ColdOps::SweepOrphans, cold/sweep.cc) and the sink's half of its promise:
// pack objects no manifest names (a job that uploaded its object and was then dropped, failed
// for good or died with its daemon) were kept by everything, for ever, and a retired tenant's
// purge said "complete" while such an object still held its bytes.
#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cold/manifest.h"
#include "cold/ops.h"
#include "cold/sink.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/sink_test_util.h"
#include "tests/cold/tier_fixture.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {

constexpr uint64_t kHour = 3600;

// Only the object: what a job leaves when it dies after its first step.
PackedPair Orphan(MemoryObjectStore& s3, PackedPair p) {
  REQUIRE(s3.Put(p.object_key, p.object).ok());
  return p;
}

SweepReport Sweep(ObjectStore& s3, uint64_t now, size_t max_deletes = 100,
                  std::function<std::string(const std::string&)> claim = {},
                  std::function<void(const std::string&)> release = {}) {
  ColdOps ops(s3, kPrefix, {}, TestKeys());
  return ops.SweepOrphans(now, kHour, max_deletes, claim, release);
}

bool Has(MemoryObjectStore& s3, const std::string& key) { return s3.Objects().count(key) == 1; }

}  // namespace

TEST_CASE("Sweep: an orphan pack object older than the minimum age goes, named and young ones stay") {
  MemoryObjectStore s3;
  PackedPair named = Uploaded(s3, MakePack(0, 2));
  PackedPair old_orphan = Orphan(s3, MakePack(10, 2));
  const std::string stray = std::string(kPrefix) + "packs/README";  // not a pack's key
  s3.Set(stray, {'x'});
  s3.AdvanceClock(2 * kHour);
  PackedPair young_orphan = Orphan(s3, MakePack(20, 1));  // its manifest may be on its way
  s3.ClearLog();

  SweepReport r = Sweep(s3, s3.Now());
  CHECK_FALSE(r.error);
  CHECK(r.packs_listed == 3);
  CHECK(r.referenced == 1);
  CHECK(r.young == 1);
  CHECK(r.deleted == std::vector<std::string>{old_orphan.object_key});
  CHECK(r.bytes_deleted == old_orphan.object.size());
  CHECK(r.complete);
  CHECK_FALSE(Has(s3, old_orphan.object_key));
  CHECK(Has(s3, named.object_key));
  CHECK(Has(s3, young_orphan.object_key));
  CHECK(Has(s3, stray));
  // Each DELETE is confirmed by a HEAD that finds nothing.
  auto log = s3.Log();
  for (size_t i = 0; i < log.size(); i++) {
    if (log[i].verb != "DELETE") continue;
    REQUIRE(i + 1 < log.size());
    CHECK(log[i + 1].verb == "HEAD");
    CHECK(log[i + 1].key == log[i].key);
  }
  // Its age is the store's clock against `now`: an object "from the future" is not old.
  MemoryObjectStore skewed;
  PackedPair ahead = Orphan(skewed, MakePack(30, 1));
  CHECK(Sweep(skewed, skewed.Now() - 10 * kHour).young == 1);
  CHECK(Has(skewed, ahead.object_key));
}

TEST_CASE("Sweep: a manifest that cannot be read stops it before anything is deleted") {
  MemoryObjectStore s3;
  PackedPair orphan = Orphan(s3, MakePack(0, 1));
  Sha256 garbage{};
  garbage[0] = 7;
  const std::string bad = ManifestKey(kPrefix, garbage);
  s3.Set(bad, {'n', 'o', 't'});
  s3.AdvanceClock(2 * kHour);
  SweepReport r = Sweep(s3, s3.Now());
  REQUIRE(r.error);
  CHECK(r.error->message.find(bad) != std::string::npos);
  CHECK(r.deleted.empty());
  CHECK_FALSE(r.complete);
  CHECK(Has(s3, orphan.object_key));

  // A manifest the store fails to return (not "absent") stops it too.
  REQUIRE(s3.Delete(bad).ok());
  PackedPair named = Uploaded(s3, MakePack(5, 1));
  s3.AdvanceClock(2 * kHour);
  s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "GET" && q.key == named.manifest_key) return Temporary();
    return std::nullopt;
  });
  r = Sweep(s3, s3.Now());
  REQUIRE(r.error);
  CHECK(r.deleted.empty());
  CHECK(Has(s3, orphan.object_key));
  s3.SetFault({});
  r = Sweep(s3, s3.Now());
  CHECK(r.deleted == std::vector<std::string>{orphan.object_key});
  CHECK(Has(s3, named.object_key));
}

TEST_CASE("Sweep: an object named by a manifest written during the sweep stays") {
  MemoryObjectStore s3;
  PackedPair late = Orphan(s3, MakePack(0, 1));
  PackedPair rewritten = Orphan(s3, MakePack(3, 1));
  s3.AdvanceClock(2 * kHour);
  // Another node's job: its manifest goes up between the sweep's two readings of manifests,
  // and the same bytes packed again elsewhere refresh the other object.
  class Racing final : public ForwardingObjectStore {
   public:
    Racing(MemoryObjectStore& s3, PackedPair late, PackedPair again)
        : ForwardingObjectStore(s3), s3_(s3), late_(std::move(late)), again_(std::move(again)) {}
    ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override {
      if (prefix.find("/manifests/") != std::string_view::npos && ++manifest_lists_ == 2) {
        REQUIRE(s3_.Put(late_.manifest_key, late_.manifest).ok());
        REQUIRE(s3_.Put(again_.object_key, again_.object).ok());
      }
      return inner_.List(prefix);
    }
   private:
    MemoryObjectStore& s3_;
    PackedPair late_, again_;
    int manifest_lists_ = 0;
  } racing(s3, late, rewritten);
  SweepReport r = Sweep(racing, s3.Now());
  CHECK_FALSE(r.error);
  CHECK(r.deleted.empty());
  CHECK(r.referenced == 1);
  CHECK(r.young == 1);
  CHECK(Has(s3, late.object_key));
  CHECK(Has(s3, rewritten.object_key));
}

TEST_CASE("Sweep: what a claim refuses is kept, what it claimed is released, and the bound holds") {
  MemoryObjectStore s3;
  PackedPair a = Orphan(s3, MakePack(0, 1));
  PackedPair b = Orphan(s3, MakePack(1, 1));
  PackedPair c = Orphan(s3, MakePack(2, 1));
  s3.AdvanceClock(2 * kHour);
  std::vector<std::string> claimed, released;
  auto claim = [&](const std::string& key) -> std::string {
    if (key == b.object_key) return "held by a job";
    claimed.push_back(key);
    return "";
  };
  auto release = [&](const std::string& key) { released.push_back(key); };
  SweepReport r = Sweep(s3, s3.Now(), 100, claim, release);
  CHECK(r.busy == 1);
  REQUIRE(r.kept.size() == 1);
  CHECK(r.kept[0] == b.object_key + ": held by a job");
  CHECK_FALSE(r.complete);  // an orphan old enough is left
  CHECK(r.deleted.size() == 2);
  CHECK(claimed == released);
  CHECK(Has(s3, b.object_key));

  PackedPair d = Orphan(s3, MakePack(3, 1));
  PackedPair e = Orphan(s3, MakePack(4, 1));
  s3.AdvanceClock(2 * kHour);
  r = Sweep(s3, s3.Now(), 1);
  CHECK(r.deleted.size() == 1);
  CHECK(r.more);
  CHECK_FALSE(r.complete);
  r = Sweep(s3, s3.Now(), 100);
  CHECK(r.deleted.size() == 2);  // b (no claim now), and the other of d and e
  CHECK(r.complete);
  CHECK_FALSE(Has(s3, d.object_key));
  CHECK_FALSE(Has(s3, e.object_key));
}

// Review of the change (2026-12-07): objects kept for a claim filled the bound before they were
// refused, so every call stopped at the same first ones and the orphans after them stayed.
TEST_CASE("Sweep: objects kept for a claim do not count against the bound") {
  MemoryObjectStore s3;
  PackedPair a = Orphan(s3, MakePack(0, 1));
  PackedPair b = Orphan(s3, MakePack(1, 1));
  s3.AdvanceClock(2 * kHour);
  const std::string held = std::min(a.object_key, b.object_key), other = std::max(a.object_key, b.object_key);
  auto claim = [&](const std::string& key) -> std::string { return key == held ? "held" : ""; };
  SweepReport r = Sweep(s3, s3.Now(), 1, claim, [](const std::string&) {});
  CHECK(r.busy == 1);
  CHECK(r.deleted == std::vector<std::string>{other});
  CHECK_FALSE(r.more);
}

TEST_CASE("Sweep: an object of an age the store does not give is kept, and the sweep is not complete") {
  MemoryObjectStore s3;
  PackedPair orphan = Orphan(s3, MakePack(0, 1));
  class NoDates final : public ForwardingObjectStore {
   public:
    using ForwardingObjectStore::ForwardingObjectStore;
    ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override {
      auto listed = inner_.List(prefix);
      if (listed.ok()) {
        for (ObjectMeta& m : listed.value()) m.modified_unix_s = 0;
      }
      return listed;
    }
  } no_dates(s3);
  s3.AdvanceClock(2 * kHour);
  SweepReport r = Sweep(no_dates, s3.Now());
  CHECK(r.unknown_age == 1);
  CHECK(r.deleted.empty());
  CHECK_FALSE(r.complete);
  CHECK(Has(s3, orphan.object_key));
}

// The sink's half: a job that failed at its manifest and waited (for an operator's retry) longer
// than object_fresh_ms puts its object again before the manifest, so a sweep that took the
// object meanwhile leaves no manifest naming a missing object.
TEST_CASE("Sink: a job back at its manifest after a long wait puts its object again first") {
  for (bool stale : {false, true}) {
    CAPTURE(stale);
    MemoryObjectStore s3;
    bool deny = true;
    s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
      if (q.verb == "PUT" && q.key.find("/manifests/") != std::string::npos && deny) return Permanent();
      return std::nullopt;
    });
    SinkLimits limits = Fast();
    limits.object_fresh_ms = stale ? 0 : 600000;  // 0: every wait is long
    Sink sink(s3, kPrefix, limits);
    PackedPair p = MakePack(0, 2);
    const PackedPair copy = p;
    REQUIRE(sink.Submit(std::move(p)).admission == Admission::kAccepted);
    REQUIRE(sink.Drain().newly_failed == 1);
    REQUIRE(s3.Delete(copy.object_key).ok());  // a sweep took it while the job waited
    deny = false;
    REQUIRE(sink.Retry(sink.Failed().at(0).id));
    CHECK(sink.Drain().uploaded == 1);
    CHECK(Has(s3, copy.manifest_key));
    CHECK(Has(s3, copy.object_key) == stale);  // a short wait trusts the object it put
  }
}

TEST_CASE("Cold control: cold.sweep is an admin's, bounded, with an hour's floor") {
  TierFixture f;
  const uint64_t wall_now = WallNowNs() / 1'000'000'000ull;
  f.s3.SetClock(wall_now - 3 * kHour);
  PackedPair old_orphan = Orphan(f.s3, MakePack(0, 1));
  f.s3.SetClock(wall_now);
  PackedPair young_orphan = Orphan(f.s3, MakePack(1, 1));
  CHECK(f.Ctl(kAcme, {{"op", "cold.sweep"}})["errno"] == "EACCES");
  for (nlohmann::json bad : {nlohmann::json(3599), nlohmann::json(-1), nlohmann::json("1h"),
                             nlohmann::json(400000000)}) {
    CAPTURE(bad);
    CHECK(f.Ctl(kAdmin, {{"op", "cold.sweep"}, {"older_than", bad}})["errno"] == "EINVAL");
  }
  CHECK(f.Ctl(kAdmin, {{"op", "cold.sweep"}, {"max_deletes", 0}})["errno"] == "EINVAL");
  CHECK(Has(f.s3, old_orphan.object_key));
  // The default minimum age is a day: nothing here is that old.
  nlohmann::json by_default = f.Ctl(kAdmin, {{"op", "cold.sweep"}});
  CHECK(by_default["young"] == 2);
  CHECK(by_default["deleted"].empty());
  nlohmann::json swept = f.Ctl(kAdmin, {{"op", "cold.sweep"}, {"older_than", 3600}});
  CHECK(swept["ok"] == true);
  CHECK(f.s3.Objects().count(std::string(kPrefix) + "sweep-clock") == 0);  // the clock's probe is gone
  CHECK(swept["young"] == 1);
  CHECK(swept["deleted"] == nlohmann::json::array({old_orphan.object_key}));
  CHECK(swept["bytes_deleted"] == old_orphan.object.size());
  CHECK(swept["complete"] == true);
  CHECK_FALSE(Has(f.s3, old_orphan.object_key));
  CHECK(Has(f.s3, young_orphan.object_key));
}

TEST_CASE("Cold control: a sweep keeps the object of a job this node still holds, and takes it once dropped") {
  TierFixture f;
  const uint64_t wall_now = WallNowNs() / 1'000'000'000ull;
  f.s3.SetClock(wall_now - 3 * kHour);
  f.s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "PUT" && q.key.find("/manifests/") != std::string::npos) return Permanent();
    return std::nullopt;
  });
  f.Commit(0);
  nlohmann::json pack = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"tenant", "acme"}});
  REQUIRE(pack["ok"] == true);
  f.s3.SetClock(wall_now);  // the sweep reads the store's clock: three hours on
  std::vector<FailedJob> failed = f.tier->sink().Failed();
  REQUIRE(failed.size() == 1);
  std::string object;
  for (const auto& [k, v] : f.s3.Objects()) {
    if (k.find("/packs/") != std::string::npos) object = k;
  }
  REQUIRE(!object.empty());
  nlohmann::json held = f.Ctl(kAdmin, {{"op", "cold.sweep"}, {"older_than", 3600}});
  CHECK(held["busy"] == 1);
  CHECK(held["complete"] == false);
  CHECK(held["deleted"].empty());
  REQUIRE(held["kept"].size() == 1);
  CHECK(held["kept"][0].get<std::string>().starts_with(object + ": "));
  CHECK(Has(f.s3, object));
  // Released: the sweep claims nothing for longer than itself (a pack of the same bytes is
  // accepted again).
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.drop"}, {"job", failed[0].id}})["ok"] == true);
  nlohmann::json swept = f.Ctl(kAdmin, {{"op", "cold.sweep"}, {"older_than", 3600}});
  CHECK(swept["deleted"] == nlohmann::json::array({object}));
  CHECK(swept["complete"] == true);
  f.s3.SetFault({});
  nlohmann::json again = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"tenant", "acme"}});
  CHECK(again["refused_packs"] == 0);
  CHECK(again["complete"] == true);
  CHECK(Has(f.s3, object));  // the same bytes, the same object
}

// Review of the change (2026-12-07): ages were judged against this node's clock; one running
// hours ahead of the object store's took uploads in flight for old ones.
TEST_CASE("Cold control: a sweep judges ages by the object store's clock, not a node's that runs ahead") {
  TierFixture f;
  const uint64_t wall_now = WallNowNs() / 1'000'000'000ull;
  f.s3.SetClock(wall_now - 2 * kHour);  // the store's clock two hours behind this node's
  PackedPair just_written = Orphan(f.s3, MakePack(0, 1));
  nlohmann::json r = f.Ctl(kAdmin, {{"op", "cold.sweep"}, {"older_than", 3600}});
  CHECK(r["ok"] == true);
  CHECK(r["young"] == 1);
  CHECK(r["deleted"].empty());
  CHECK(Has(f.s3, just_written.object_key));
}

}  // namespace gpucache::cold
