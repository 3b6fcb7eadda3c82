// The cold tier's control requests and metrics over an in-memory object store: the operations
// defects of issue 16 (errno of a missing manifest, a truncated pack, requests counted, metric
// names, purge of a retired tenant, listing instead of HEADs, asynchronous refills).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "cold/control.h"
#include "cold/locator.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

namespace {

const Principal kAdmin{.uid = 0, .gid = 0, .admin = true};
const Principal kAcme{.uid = 1000, .gid = 1000, .admin = false, .tenants = {"acme"}};

struct TierFixture {
  MemoryStore hot;
  MemoryObjectStore s3;
  std::unique_ptr<ColdTier> tier;
  explicit TierFixture(std::set<std::string> retired = {}, uint64_t flush_interval_ms = 2000,
                       size_t known_places = 65536) {
    ColdTierOptions o;
    o.known_places = known_places;
    o.flush_interval_ms = flush_interval_ms;
    o.prefix = kPrefix;
    o.write_back = WriteBack::kManual;
    o.retired_tenants = std::move(retired);
    o.sink.backoff_base_ms = 1;
    o.sink.backoff_max_ms = 2;
    o.sink.redrive_interval_ms = 0;
    tier = std::make_unique<ColdTier>(hot, s3, o, TestKeys());
  }
  json Ctl(const Principal& who, const json& req) {
    return json::parse(HandleColdRequest(*tier, who, req.dump()));
  }
  void Commit(int i, std::string tenant = "acme", size_t size = 1000) {
    REQUIRE(CommitBlock(hot, NthIdentity(i, tenant), PayloadOf(i, size)) == StatusCode::kOk);
  }
  json Refill(int i, std::string tenant = "acme") {
    return Ctl(kAdmin, {{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(NthIdentity(i, tenant)))}});
  }
};

}  // namespace

TEST_CASE("Cold control: reclaiming a manifest that does not exist is ENOENT") {
  TierFixture f;
  json r = f.Ctl(kAdmin, {{"op", "cold.reclaim"}, {"manifest", std::string(64, 'a')}});
  CHECK(r["ok"] == false);
  CHECK(r["errno"] == "ENOENT");
}

// The digest (hex) of the one manifest in the object store.
std::string OnlyManifest(MemoryObjectStore& s3) {
  std::string manifest;
  for (auto& [key, bytes] : s3.Objects()) {
    if (key.find("/manifests/") != std::string::npos) manifest = key.substr(key.rfind('/') + 1);
  }
  REQUIRE_FALSE(manifest.empty());
  return manifest;
}

// Regression (review, 2026-12-06): a stranger's reclaim made this node forget the manifest's
// known places before anything was checked, and was told how long the manifest is retained.
TEST_CASE("Cold control: a stranger's reclaim is EACCES before retention and changes nothing") {
  TierFixture f;
  f.Commit(0, "acme", 5000);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  const std::string manifest = OnlyManifest(f.s3);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.retain"}, {"manifest", manifest}, {"seconds", 3600}})["ok"] == true);
  REQUIRE(f.tier->Stats().known_places == 1);
  const Principal globex{.uid = 2000, .gid = 2000, .admin = false, .tenants = {"globex"}};
  auto objects = f.s3.Objects();
  json r = f.Ctl(globex, {{"op", "cold.reclaim"}, {"manifest", manifest}});
  CHECK(r["ok"] == false);
  CHECK(r["errno"] == "EACCES");
  CHECK(r.dump().find("retained") == std::string::npos);
  CHECK(r.dump().find("acme") == std::string::npos);
  CHECK(f.tier->Stats().known_places == 1);
  CHECK(f.s3.Objects() == objects);
  // Its owner is refused by the retention instead, also changing nothing.
  CHECK(f.Ctl(kAcme, {{"op", "cold.reclaim"}, {"manifest", manifest}})["errno"] == "EPERM");
  CHECK(f.tier->Stats().known_places == 1);
}

// Regression (review, 2026-12-06): seconds * 10^9 wrapped past 2^64, so a retention of
// 18,446,744,074 s ended about 0.3 s later.
TEST_CASE("Cold control: a retention too long for its record is EINVAL, not a deadline that wrapped") {
  TierFixture f;
  f.Commit(0, "acme", 5000);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  const std::string manifest = OnlyManifest(f.s3);
  json r = f.Ctl(kAdmin, {{"op", "cold.retain"}, {"manifest", manifest}, {"seconds", 18446744074ull}});
  CHECK(r["ok"] == false);
  CHECK(r["errno"] == "EINVAL");
  json century = f.Ctl(kAdmin, {{"op", "cold.retain"}, {"manifest", manifest}, {"seconds", 3153600000ull}});
  CHECK(century["ok"] == true);
  CHECK(f.Ctl(kAdmin, {{"op", "cold.reclaim"}, {"manifest", manifest}})["errno"] == "EPERM");
}

TEST_CASE("Cold control: a pack shorter than its locator says is corrupt, not unavailable") {
  TierFixture f;
  f.Commit(0, "acme", 5000);
  f.Commit(1, "acme", 5000);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  for (auto& [key, bytes] : f.s3.Objects()) {
    if (key.find("/packs/") == std::string::npos) continue;
    f.s3.Set(key, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 3));
  }
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(0))) == StatusCode::kOk);
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(1))) == StatusCode::kOk);
  json r0 = f.Refill(0), r1 = f.Refill(1);
  // Both ranges end past the cut: a real gateway answers 416 or a short 206.
  CHECK(r0["result"] == "missing");
  CHECK(r1["result"] == "missing");
  CHECK(r0["reason"] == "corrupt");
  CHECK(r1["reason"] == "corrupt");
}

TEST_CASE("Cold control: a refill streams into the hot tier but commits only verified bytes") {
  // The payload goes into a reservation as it downloads; a byte that does not match the
  // locator's checksum aborts it: nothing is committed, and a later good refill commits.
  TierFixture f;
  f.Commit(0, "acme", 200000);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  std::string pack_key;
  std::vector<uint8_t> good;
  for (auto& [key, bytes] : f.s3.Objects()) {
    if (key.find("/packs/") != std::string::npos) pack_key = key, good = bytes;
  }
  REQUIRE(!pack_key.empty());
  std::vector<uint8_t> bad = good;
  bad[bad.size() - 7] ^= 0x01;  // one bit of the block's last bytes
  f.s3.Set(pack_key, bad);
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(0))) == StatusCode::kOk);
  json r = f.Refill(0);
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "corrupt");
  CHECK_FALSE(f.hot.Stat(AddressOf(NthIdentity(0))).ok());
  f.s3.Set(pack_key, good);
  CHECK(f.Refill(0)["result"] == "hit");  // the aborted reservation is gone
  CHECK(f.hot.Stat(AddressOf(NthIdentity(0))).ok());
  CHECK(f.Refill(0)["result"] == "already-hot");
}

TEST_CASE("Cold control: refill GETs are counted in requests") {
  TierFixture f({}, 2000, /*known_places=*/0);  // every refill reads its locator
  f.Commit(0);
  f.Ctl(kAdmin, {{"op", "cold.pack"}});
  uint64_t before = f.Ctl(kAdmin, {{"op", "cold.report"}})["cold"]["requests"];
  f.s3.ClearLog();
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(0))) == StatusCode::kOk);
  CHECK(f.Refill(0)["result"] == "hit");
  uint64_t after = f.Ctl(kAdmin, {{"op", "cold.report"}})["cold"]["requests"];
  CHECK(f.s3.Log().size() == 2);  // the sealed locator, then the range it names
  CHECK(after - before == f.s3.Log().size());
}

TEST_CASE("Cold metrics: no gauge shares its name with a counter's family") {
  TierFixture f;
  std::string text = RenderColdMetrics(f.tier->Stats());
  std::map<std::string, std::string> types;
  std::regex type_line("# TYPE (\\S+) (\\S+)");
  for (std::sregex_iterator it(text.begin(), text.end(), type_line), end; it != end; ++it) {
    types[(*it)[1]] = (*it)[2];
  }
  REQUIRE(types.count("gpucache_cold_jobs_failed_total"));
  CHECK(types.count("gpucache_cold_jobs_failed_now"));
  for (const auto& [name, type] : types) {
    if (type != "counter") continue;
    CHECK(name.size() > 6);
    CHECK(name.substr(name.size() - 6) == "_total");
    std::string family = name.substr(0, name.size() - 6);
    CAPTURE(name);
    CHECK(types.count(family) == 0);  // OpenMetrics: "x_total" is the sample of family "x"
  }
}

TEST_CASE("Cold control: pack finds cold blocks with one listing, not a HEAD per block") {
  TierFixture f;
  for (int i = 0; i < 6; i++) f.Commit(i);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  f.Commit(6);
  f.s3.ClearLog();
  json again = f.Ctl(kAdmin, {{"op", "cold.pack"}});
  CHECK(again["skipped_cold"] == 6);
  CHECK(again["blocks"] == 1);
  CHECK(f.s3.Count("HEAD") == 0);
  CHECK(f.s3.Count("LIST") == 1);
}

TEST_CASE("Cold control: pack packs again a block whose locator cannot be one, and counts it") {
  TierFixture f;
  for (int i = 0; i < 3; i++) f.Commit(i);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  // Garbage where block 1's locator is, and a truncated one for block 2.
  std::string key1 = LocatorKey(kPrefix, AddressOf(NthIdentity(1)));
  std::string key2 = LocatorKey(kPrefix, AddressOf(NthIdentity(2)));
  f.s3.Set(key1, {'g', 'a', 'r', 'b', 'a', 'g', 'e'});
  std::vector<uint8_t> truncated = f.s3.Objects().at(key2);
  truncated.resize(truncated.size() - 1);
  f.s3.Set(key2, truncated);
  REQUIRE_FALSE(DecodeLocator(f.s3.Objects().at(key1)));
  REQUIRE_FALSE(DecodeLocator(f.s3.Objects().at(key2)));
  json r = f.Ctl(kAdmin, {{"op", "cold.pack"}});
  CHECK(r["skipped_cold"] == 1);
  CHECK(r["invalid_locators"] == 2);
  CHECK(r["blocks"] == 2);
  CHECK(r["complete"] == true);
  // Both are refillable again: their locators were replaced by sealed ones.
  for (int i : {1, 2}) {
    REQUIRE(f.hot.Evict(AddressOf(NthIdentity(i))) == StatusCode::kOk);
    CHECK(f.Refill(i)["result"] == "hit");
  }
}

TEST_CASE("Cold control: a failed listing leaves blocks unknown: not packed again, pack incomplete") {
  TierFixture f;
  for (int i = 0; i < 3; i++) f.Commit(i);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  f.s3.SetFault([](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "LIST") return ObjectError{ObjectErrorKind::kTemporary, 503, "SlowDown", "slow"};
    return std::nullopt;
  });
  f.s3.ClearLog();
  json r = f.Ctl(kAdmin, {{"op", "cold.pack"}});
  CHECK(r["blocks"] == 0);
  CHECK(r["skipped_unknown"] == 3);
  CHECK(r["complete"] == false);
  CHECK(r.contains("list_error"));
  CHECK(f.s3.Count("PUT") == 0);  // nothing uploaded a second time
}

TEST_CASE("Cold control: the report's failed is the failed queue now") {
  TierFixture f;
  f.Commit(0);
  bool down = true;
  f.s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (down && r.verb == "PUT") return ObjectError{ObjectErrorKind::kTemporary, 503, "SlowDown", ""};
    return std::nullopt;
  });
  json packed = f.Ctl(kAdmin, {{"op", "cold.pack"}});
  CHECK(packed["complete"] == false);
  CHECK(packed["drain"]["failed"] == 1);
  down = false;
  json failed = f.Ctl(kAdmin, {{"op", "cold.failed"}});
  REQUIRE(failed["failed"].size() == 1);
  f.Ctl(kAdmin, {{"op", "cold.retry"}, {"job", failed["failed"][0]["job"]}});
  f.Ctl(kAdmin, {{"op", "cold.drain"}});
  json rep = f.Ctl(kAdmin, {{"op", "cold.report"}})["cold"];
  CHECK(rep["failed"] == 0);  // was a running total (1) before
  CHECK(rep["failed_entries_total"] == 1);
  CHECK(rep["uploaded"] == 1);
  CHECK(rep["submitted"].get<uint64_t>() == rep["uploaded"].get<uint64_t>() + rep["pending"].get<uint64_t>() +
                                               rep["in_flight"].get<uint64_t>() + rep["failed"].get<uint64_t>() +
                                               rep["dropped"].get<uint64_t>());
}

TEST_CASE("Cold control: purge_tenant deletes a retired tenant's objects and keeps the others'") {
  TierFixture f({"oldco"});
  // Pack while oldco was live (a tier without it retired), with acme alongside.
  {
    ColdTierOptions o;
    o.prefix = kPrefix;
    o.write_back = WriteBack::kManual;
    o.pack.max_blocks = 2;
    ColdTier live(f.hot, f.s3, o, TestKeys());
    for (int i = 0; i < 4; i++) f.Commit(i, "oldco");
    REQUIRE(HandleColdRequest(live, kAdmin, R"({"op":"cold.pack","tenant":"oldco"})").find("\"complete\":true") !=
            std::string::npos);
    f.Commit(0, "acme");
    REQUIRE(HandleColdRequest(live, kAdmin, R"({"op":"cold.pack","tenant":"acme"})").find("\"complete\":true") !=
            std::string::npos);
  }
  auto keys_with = [&](const std::string& part) {
    size_t n = 0;
    for (auto& [k, v] : f.s3.Objects()) n += k.find(part) != std::string::npos;
    return n;
  };
  REQUIRE(keys_with("locators/oldco/") == 4);
  REQUIRE(keys_with("/manifests/") == 3);

  CHECK(f.Ctl(kAcme, {{"op", "cold.purge_tenant"}, {"tenant", "oldco"}})["errno"] == "EACCES");
  CHECK(f.Ctl(kAdmin, {{"op", "cold.purge_tenant"}, {"tenant", "acme"}})["errno"] == "EPERM");  // not retired

  json first = f.Ctl(kAdmin, {{"op", "cold.purge_tenant"}, {"tenant", "oldco"}, {"max_manifests", 1}});
  CHECK(first["ok"] == true);
  CHECK(first["manifests_deleted"] == 1);
  CHECK(first["complete"] == false);  // bounded: one manifest per request here
  json second = f.Ctl(kAdmin, {{"op", "cold.purge_tenant"}, {"tenant", "oldco"}});
  CHECK(second["complete"] == true);
  CHECK(keys_with("locators/oldco/") == 0);
  CHECK(keys_with("/manifests/") == 1);  // acme's
  CHECK(keys_with("/packs/") == 1);
  CHECK(f.Refill(0, "acme")["result"] == "already-hot");
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(0, "acme"))) == StatusCode::kOk);
  CHECK(f.Refill(0, "acme")["result"] == "hit");
}

TEST_CASE("Cold control: an async refill returns an op id at once, its owner polls the answer") {
  TierFixture f;
  f.Commit(3);
  f.Ctl(kAdmin, {{"op", "cold.pack"}});
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(3))) == StatusCode::kOk);
  std::string id = HexEncode(EncodePhysicalKey(NthIdentity(3)));
  json queued = f.Ctl(kAcme, {{"op", "cold.refill"}, {"identity", id}, {"async", true}});
  REQUIRE(queued["ok"] == true);
  REQUIRE(queued.contains("op_id"));
  // Another user learns nothing of it.
  Principal other{.uid = 2000, .gid = 2000, .admin = false, .tenants = {"globex"}};
  CHECK(f.Ctl(other, {{"op", "cold.op"}, {"op_id", queued["op_id"]}})["errno"] == "ENOENT");
  json done;
  for (int i = 0; i < 2000; i++) {
    done = f.Ctl(kAcme, {{"op", "cold.op"}, {"op_id", queued["op_id"]}});
    if (done["state"] == "done") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(done["state"] == "done");
  CHECK(done["result"] == "hit");
  // Answered once, then forgotten.
  CHECK(f.Ctl(kAcme, {{"op", "cold.op"}, {"op_id", queued["op_id"]}})["errno"] == "ENOENT");
  // A refusal comes back the same way.
  json denied = f.Ctl(other, {{"op", "cold.refill"}, {"identity", id}, {"async", true}});
  json answer;
  for (int i = 0; i < 2000; i++) {
    answer = f.Ctl(other, {{"op", "cold.op"}, {"op_id", denied["op_id"]}});
    if (answer.value("state", "") == "done") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(answer["errno"] == "EACCES");
}

TEST_CASE("Cold control: an async pack runs on the workers and answers through its op id") {
  TierFixture f;
  for (int i = 0; i < 5; i++) f.Commit(i);
  // While the pack's first upload is held up, the control request has already been answered.
  std::timed_mutex gate;  // timed: a pack that runs inside the request must not hang the test
  gate.lock();
  f.s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT" && r.key.find("/packs/") != std::string::npos) {
      if (gate.try_lock_for(std::chrono::seconds(5))) gate.unlock();  // until the test saw the op
    }
    return std::nullopt;
  });
  json queued = f.Ctl(kAcme, {{"op", "cold.pack"}, {"tenant", "acme"}, {"async", true}});
  REQUIRE(queued["ok"] == true);
  REQUIRE(queued.contains("op_id"));
  CHECK_FALSE(queued.contains("blocks"));  // not the pack's report: it has not run yet
  json polled = f.Ctl(kAcme, {{"op", "cold.op"}, {"op_id", queued["op_id"]}});
  CHECK(polled["ok"] == true);
  CHECK(polled["state"] != "done");
  gate.unlock();
  json done;
  for (int i = 0; i < 2000; i++) {
    done = f.Ctl(kAcme, {{"op", "cold.op"}, {"op_id", queued["op_id"]}});
    if (done.value("state", "") == "done") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(done["state"] == "done");
  CHECK(done["blocks"] == 5);
  CHECK(done["complete"] == true);
  // Refusals are answered at once, without an op: a non-member, a bad "async".
  CHECK(f.Ctl(kAcme, {{"op", "cold.pack"}, {"async", true}})["errno"] == "EACCES");
  CHECK(f.Ctl(kAdmin, {{"op", "cold.pack"}, {"async", 1}})["errno"] == "EINVAL");
}

TEST_CASE("Cold control: two async packs do not pack the same blocks twice") {
  TierFixture f;
  for (int i = 0; i < 6; i++) f.Commit(i);
  json a = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"async", true}});
  json b = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"async", true}});
  auto wait = [&](const json& q) {
    json r;
    for (int i = 0; i < 2000; i++) {
      r = f.Ctl(kAdmin, {{"op", "cold.op"}, {"op_id", q["op_id"]}});
      if (r.value("state", "") == "done") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return r;
  };
  json ra = wait(a), rb = wait(b);
  CHECK(ra["blocks"].get<int>() + rb["blocks"].get<int>() == 6);  // each block packed once
  CHECK(ra["skipped_cold"].get<int>() + rb["skipped_cold"].get<int>() == 6);
  CHECK(f.tier->Stats().sink.submitted == ra["packs"].get<uint64_t>() + rb["packs"].get<uint64_t>());
}

TEST_CASE("Cold control: cold.op checks wait_ms") {
  MemoryObjectStore s3;
  MemoryStore hot;
  ColdTierOptions options;
  options.prefix = kPrefix;
  options.write_back = WriteBack::kManual;
  ColdTier tier(hot, s3, options, TestKeys());
  Principal admin{.uid = 0, .gid = 0, .admin = true};
  CHECK(HandleColdRequest(tier, admin, R"({"op":"cold.op","op_id":1,"wait_ms":-1})").find("EINVAL") != std::string::npos);
  CHECK(HandleColdRequest(tier, admin, R"({"op":"cold.op","op_id":1,"wait_ms":10001})").find("EINVAL") != std::string::npos);
  CHECK(HandleColdRequest(tier, admin, R"({"op":"cold.op","op_id":1,"wait_ms":5})").find("ENOENT") != std::string::npos);
}

TEST_CASE("Cold control: a pack reports the uploads of its own packs while background rounds run") {
  // Background write-back rounds every millisecond: before the fix they took a running pack's
  // jobs, and the pack said "uploaded": 0 for a pack that was in S3 (a flaky mount test).
  TierFixture f({}, /*flush_interval_ms=*/1);
  f.tier->Start();
  for (int i = 0; i < 30; i++) {
    f.Commit(i);
    json r = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"tenant", "acme"}});
    CAPTURE(r.dump());
    REQUIRE(r["blocks"] == 1);
    CHECK(r["drain"]["uploaded"] == 1);
  }
  f.tier->Stop();
}

// Regression (review, 2026-12-06): packing read each block through Open, a client's read, so
// every block written back (and every commit of a block with a known place) got a use no client
// made: the cold tier moved blocks up the eviction order and the hot tier evicted what clients
// had used more recently.
TEST_CASE("Cold tier: packing a block is not a use of it: the eviction order stays the clients'") {
  StoreOptions so;
  so.limits.tenants["acme"].max_retained_bytes = 3000;  // three blocks of 1000 bytes
  so.eviction_policy = "prefix-lru";
  MemoryStore hot(so);
  MemoryObjectStore s3;
  ColdTierOptions o;
  o.prefix = kPrefix;
  o.write_back = WriteBack::kAfterCommit;
  o.sink.backoff_base_ms = 1;
  o.sink.backoff_max_ms = 2;
  ColdTier tier(hot, s3, o, TestKeys());
  for (int i = 1; i <= 3; i++) REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
  const BlockAddress first = AddressOf(NthIdentity(1));
  SUBCASE("write-back") {
    tier.OnCommitted(first);  // what the commit observer does
    tier.PackQueued();        // the write-back round: reads block 1 into a pack
    tier.DrainNow();          // uploaded: this node now knows block 1's place
    tier.OnCommitted(first);  // committed again: the known place is checked against it
    tier.PackQueued();
    CHECK(tier.Stats().sink.submitted == 1);  // not packed twice
  }
  SUBCASE("backfill") {
    // Blocks 2 and 3 are listed as cold already: the backfill reads block 1 alone.
    for (int i = 2; i <= 3; i++) s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(i))), EncodeLegacyLocator(Sha256{}));
    BackfillReport b = tier.Pack("acme", UINT64_MAX);
    REQUIRE(b.blocks == 1);
  }
  // Block 1 is still the one least recently used by a client: the fourth block evicts it.
  REQUIRE(CommitBlock(hot, NthIdentity(4), PayloadOf(4, 1000)) == StatusCode::kOk);
  CHECK_FALSE(hot.Stat(first).ok());
  CHECK(hot.Stat(AddressOf(NthIdentity(2))).ok());
  CHECK(hot.Stat(AddressOf(NthIdentity(3))).ok());
}

namespace {
// Forwards to a MemoryObjectStore, holding every PUT until Release() (at most 10 s): a pack
// that uploads stays running, and nothing else waits behind the fake's lock meanwhile.
class HeldPuts final : public ObjectStore {
 public:
  explicit HeldPuts(MemoryObjectStore& inner) : inner_(inner) {}
  int held() const { return held_; }
  void Release() {
    std::lock_guard l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) override {
    Hold();
    return inner_.Put(key, body);
  }
  ObjectResult<Done> PutHashed(std::string_view key, std::span<const uint8_t> body, std::string_view sha) override {
    Hold();
    return inner_.PutHashed(key, body, sha);
  }
  ObjectResult<ObjectMeta> Head(std::string_view k) override { return inner_.Head(k); }
  ObjectResult<std::vector<uint8_t>> GetRange(std::string_view k, uint64_t o, uint64_t n) override {
    return inner_.GetRange(k, o, n);
  }
  ObjectResult<std::vector<uint8_t>> Get(std::string_view k, uint64_t m) override { return inner_.Get(k, m); }
  ObjectResult<Done> Delete(std::string_view k) override { return inner_.Delete(k); }
  ObjectResult<std::vector<ObjectMeta>> List(std::string_view p) override { return inner_.List(p); }

 private:
  void Hold() {
    std::unique_lock l(mu_);
    held_++;
    cv_.wait_for(l, std::chrono::seconds(10), [&] { return released_; });
  }
  MemoryObjectStore& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> held_{0};
  bool released_ = false;
};
}  // namespace

// Regression (review, 2026-12-06): an async cold.pack ran on the refill workers, and a second
// one waited there for the first (packs run one at a time): one tenant's packs held every
// worker, and other tenants' refills waited behind them for as long as the packs ran.
TEST_CASE("Cold control: async packs never hold the refill workers: another tenant's refill runs") {
  MemoryStore hot;
  MemoryObjectStore s3;
  HeldPuts held(s3);
  ColdTierOptions o = OneBlockPacks();
  o.refill_workers = 1;
  ColdTier tier(hot, held, o, TestKeys());
  for (int i = 1; i <= 4; i++) REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
  const Principal globex{.uid = 2000, .gid = 2000, .admin = false, .tenants = {"globex"}};
  auto ctl = [&](const Principal& who, const json& req) {
    return json::parse(HandleColdRequest(tier, who, req.dump()));
  };
  json packs[2];
  for (json& p : packs) {
    p = ctl(kAcme, {{"op", "cold.pack"}, {"tenant", "acme"}, {"async", true}});
    REQUIRE(p["ok"] == true);
  }
  while (held.held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the first uploads
  json q = ctl(globex, {{"op", "cold.refill"}, {"async", true},
                        {"identity", HexEncode(EncodePhysicalKey(NthIdentity(1, "globex")))}});
  REQUIRE(q["ok"] == true);
  json r = ctl(globex, {{"op", "cold.op"}, {"op_id", q["op_id"]}, {"wait_ms", 5000}});
  CHECK(r["state"] == "done");  // before: "queued" behind the packs, for as long as they ran
  CHECK(r["result"] == "missing");
  held.Release();
  for (const json& p : packs) {
    json done = ctl(kAcme, {{"op", "cold.op"}, {"op_id", p["op_id"]}, {"wait_ms", 10000}});
    CHECK(done["state"] == "done");
    CHECK(done["complete"] == true);
  }
}

// Regression (review, 2026-12-06): the tier recorded a new manifest's retention with one PUT
// after the upload and ignored its result: after one 503 the manifest had no retention, and a
// reclaim deleted it (and its pack) at once.
TEST_CASE("Cold control: a retention PUT that fails is retried: the new manifest is retained") {
  MemoryStore hot;
  MemoryObjectStore s3;
  ColdTierOptions o = OneBlockPacks();
  o.retention_ns = 3600ull * 1'000'000'000ull;  // keep every new manifest an hour
  ColdTier tier(hot, s3, o, TestKeys());
  std::atomic<int> failed{0};
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT" && r.key.find("retention/") != std::string::npos && failed++ == 0) {
      return ObjectError{ObjectErrorKind::kTemporary, 503, "SlowDown", "", true};
    }
    return std::nullopt;
  });
  REQUIRE(CommitBlock(hot, NthIdentity(1), PayloadOf(1, 1000)) == StatusCode::kOk);
  BackfillReport b = tier.Pack("acme", UINT64_MAX);
  REQUIRE(b.packs == 1);
  std::string manifest;
  for (const auto& [k, v] : s3.Objects()) {
    if (k.rfind(std::string(kPrefix) + "manifests/", 0) == 0) manifest = k.substr(k.size() - 64);
  }
  REQUIRE(manifest.size() == 64);
  auto until = tier.ops().RetentionOf(*Sha256FromHex(manifest));
  REQUIRE(until.ok());
  CHECK(until.value() > 0);  // before: no record, and nothing retried it
  json r = json::parse(HandleColdRequest(tier, kAdmin, json{{"op", "cold.reclaim"}, {"manifest", manifest}}.dump()));
  CHECK(r["errno"] == "EPERM");  // before: reclaimed at once
  CHECK(r["error"].get<std::string>().find("retained until") != std::string::npos);
}

// Regression (review, 2026-12-06): a reclaim of a manifest whose upload this node's sink still
// held (a locator step failed: the job waited in the failed queue) deleted the manifest and its
// pack; the job, retried, then wrote the remaining locator, naming objects that no longer
// existed, and a backfill took that block for cold for good.
TEST_CASE("Cold control: a manifest this node is still uploading is not reclaimed (EBUSY)") {
  MemoryStore hot;
  MemoryObjectStore s3;
  ColdTierOptions o = OneBlockPacks();
  o.pack.max_blocks = 2;
  ColdTier tier(hot, s3, o, TestKeys());
  for (int i = 1; i <= 2; i++) REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
  const std::string second = LocatorKey(kPrefix, AddressOf(NthIdentity(2)));
  std::atomic<bool> refuse{true};
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT" && r.key == second && refuse) return ObjectError{ObjectErrorKind::kPermanent, 403, "AccessDenied", ""};
    return std::nullopt;
  });
  REQUIRE(tier.Pack("acme", UINT64_MAX).packs == 1);
  std::vector<FailedJob> failed = tier.sink().Failed();
  REQUIRE(failed.size() == 1);  // object, manifest and the first locator are up; the second is not
  const std::string manifest = failed[0].manifest_key.substr(failed[0].manifest_key.size() - 64);
  auto locators = [&] {
    size_t n = 0;
    for (const auto& [k, v] : s3.Objects()) n += k.find("/locators/") != std::string::npos;
    return n;
  };
  REQUIRE(locators() == 1);

  json busy = json::parse(HandleColdRequest(tier, kAdmin, json{{"op", "cold.reclaim"}, {"manifest", manifest}}.dump()));
  CHECK(busy["errno"] == "EBUSY");  // before: reclaimed, the job's objects deleted under it
  CHECK(s3.Objects().count(failed[0].manifest_key) == 1);

  refuse = false;
  REQUIRE(tier.sink().Retry(failed[0].id));
  REQUIRE(tier.DrainNow().uploaded == 1);
  json done = json::parse(HandleColdRequest(tier, kAdmin, json{{"op", "cold.reclaim"}, {"manifest", manifest}}.dump()));
  CHECK(done["ok"] == true);
  CHECK(locators() == 0);  // before: the retried job's locator was left naming nothing
}

// Regression (review, 2026-12-06): packed_blocks counted every block a backfill read, those
// of the packs the sink refused (full) too, which are not packed and wait for the next one.
TEST_CASE("Cold control: packed_blocks counts the blocks of the packs the sink accepted") {
  MemoryStore hot;
  MemoryObjectStore s3;
  ColdTierOptions o = OneBlockPacks();
  o.sink.max_jobs = 1;  // the first job, failed, holds the only place
  s3.SetFault([](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT") return ObjectError{ObjectErrorKind::kPermanent, 403, "AccessDenied", ""};
    return std::nullopt;
  });
  ColdTier tier(hot, s3, o, TestKeys());
  for (int i = 1; i <= 3; i++) REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
  json r = json::parse(HandleColdRequest(tier, kAdmin, json{{"op", "cold.pack"}}.dump()));
  REQUIRE(r["blocks"] == 3);
  REQUIRE(r["packs"] == 1);
  REQUIRE(r["refused_packs"] == 2);
  CHECK(tier.Stats().packed_blocks == 1);  // before: 3
}

// Regression (review, 2026-12-06): a refill whose verified block the hot tier refused (a write
// over a limit) was answered EIO but counted as a hit (through a known place, a known hit too).
TEST_CASE("Cold control: a refill the hot tier refuses is counted as such, not as a hit") {
  bool known = false;
  SUBCASE("through a known place") { known = true; }
  SUBCASE("through the locator") { known = false; }
  TierFixture f({}, 2000, known ? 65536 : 0);
  f.Commit(1);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(1))) == StatusCode::kOk);
  ResourceLimits limits;
  limits.tenants["acme"].max_block_bytes = 500;  // the 1000-byte block no longer fits
  f.hot.SetLimits(limits);
  CHECK(f.Refill(1)["errno"] == "EIO");
  ColdTierStats st = f.tier->Stats();
  CHECK(st.refills == 1);
  CHECK(st.refill_hits == 0);  // before: 1
  CHECK(st.refill_known == 0);
  CHECK(st.refill_commit_failed == 1);
  CHECK(st.refill_hits + st.refill_missing + st.refill_refused + st.refill_commit_failed == st.refills);
}

}  // namespace gpucache::cold
