// The cold tier's control requests and metrics over an in-memory object store: the operations
// defects of issue 16 (errno of a missing manifest, a truncated pack, requests counted, metric
// names, purge of a retired tenant, listing instead of HEADs). Asynchronous requests:
// async_control_test.cc.
#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "cold/locator.h"
#include "tests/cold/tier_fixture.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

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

// Review (2026-12-07): a refill of a block that another writer was filling (a `.part` held
// open, or a second refill: two engines asking for one shared prefix) answered "already-hot",
// which says the block was committed, and this node remembered a known place for it; the block
// did not exist. It now follows the other fill: already hot once that commits, its own verified
// bytes committed if that fails, EBUSY only if it is still in flight after follow_fill_ms.
TEST_CASE("Cold control: a refill of a block another fill holds follows that fill") {
  TierFixture f({}, 2000, 65536, /*follow_fill_ms=*/2000);
  f.Commit(0, "acme", 5000);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  const BlockAddress a = AddressOf(NthIdentity(0));
  REQUIRE(f.hot.Evict(a) == StatusCode::kOk);
  Result<ReservationId> other = f.hot.Reserve(a, {1000, 1000});  // a writer's .part
  REQUIRE(other.ok());
  json busy = f.Refill(0);  // still held when the wait ends
  CHECK(busy["ok"] == false);
  CHECK(busy["errno"] == "EBUSY");
  CHECK_FALSE(f.hot.Stat(a).ok());
  // The other fill ends without a block while the refill waits: the refill's bytes are committed.
  std::thread abort([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    f.hot.Abort(other.value());
  });
  CHECK(f.Refill(0)["result"] == "hit");
  abort.join();
  CHECK(f.hot.Stat(a).ok());
}

// Review (2026-12-07): a refill of a block already hot downloaded its whole payload (into
// memory, up to the refill budget) before it answered already-hot.
TEST_CASE("Cold control: a refill of a block already hot fetches no payload") {
  TierFixture f;
  f.Commit(0, "acme", 64 * 1024);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  f.s3.ClearLog();
  CHECK(f.Refill(0)["result"] == "already-hot");
  CHECK(f.s3.Count("GETRANGE") == 0);
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

// gpucache_cold_refill_missing_total's series, by their reason label.
std::map<std::string, uint64_t> MissingByReason(const ColdTier& tier) {
  std::istringstream text(RenderColdMetrics(tier.Stats()));
  std::map<std::string, uint64_t> series;
  std::regex sample("gpucache_cold_refill_missing_total\\{reason=\"([a-z_]+)\"\\} (\\d+)");
  std::smatch m;
  for (std::string line; std::getline(text, line);) {
    if (std::regex_match(line, m, sample)) series[m[1]] = std::stoull(m[2]);
  }
  return series;
}

// Regression (review): refills were counted Missing without their reason, so an object store
// that failed every request (an outage) looked like blocks that were simply not in the bucket.
TEST_CASE("Cold metrics: a refill that fails counts under its reason, an outage apart from a miss") {
  const std::set<std::string> kReasons = {"absent", "legacy_manifest", "identity_mismatch",
                                          "over_budget", "corrupt", "malformed", "unavailable",
                                          "unsealed", "unknown_key", "bad_seal", "invalidated"};
  TierFixture f({}, 2000, /*known_places=*/0);  // every refill reads its locator
  f.Commit(0);
  REQUIRE(f.Ctl(kAdmin, {{"op", "cold.pack"}})["complete"] == true);
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(0))) == StatusCode::kOk);
  std::map<std::string, uint64_t> before = MissingByReason(*f.tier);
  std::set<std::string> labels;
  for (const auto& [reason, n] : before) {
    labels.insert(reason);
    CHECK(n == 0);
  }
  CHECK(labels == kReasons);  // every reason exported before its first refill

  std::string expected;
  int block = 0;
  SUBCASE("the object store answers 503") {
    f.s3.SetFault([](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
      return ObjectError{ObjectErrorKind::kTemporary, 503, "ServiceUnavailable", "down"};
    });
    expected = "unavailable";
  }
  SUBCASE("no locator: the block was never packed") {
    f.Commit(1);  // hot, not packed; evicted below
    REQUIRE(f.hot.Evict(AddressOf(NthIdentity(1))) == StatusCode::kOk);
    block = 1;
    expected = "absent";
  }
  CAPTURE(expected);
  CHECK(f.Refill(block)["reason"] == expected);  // cold.refill's reason, as the label spells it
  std::map<std::string, uint64_t> after = MissingByReason(*f.tier);
  for (const std::string& reason : kReasons) {
    CAPTURE(reason);
    CHECK(after[reason] - before[reason] == (reason == expected ? 1 : 0));
  }
  CHECK(f.tier->Stats().refill_missing == 1);  // the sum over reasons, as the total was
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
