// Known places against the real gateway (ctest fixture cold_rgw; issue 16): a node that wrote a
// block back, or refilled it once, refills it with one range GET; a place made stale behind its
// back (the pack deleted, or other bytes at its key) falls back to the locator and never serves
// an unverified byte; one tenant never uses another's place. Requests are counted by the
// daemon's own `requests` counter (cold.report).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cold/locator.h"
#include "cold/s3_client.h"
#include "tests/cold/rgw_support.h"
#include "tests/mount/mount_helpers.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;
using test::Control;
using test::MountedFs;

namespace {

CacheIdentity KBlock(int i, const std::string& tenant = "acme") {
  CacheIdentity id = test::SampleIdentity(tenant);
  id.chain[1] = test::Hash(static_cast<uint8_t>(60 + i));
  return id;
}

Bytes KPayload(int i) {
  Bytes b = test::Payload(48 * 1024 + i * 4096, static_cast<uint8_t>(i + 3));
  b[0] = static_cast<uint8_t>(i);
  return b;
}

json Ctl(const MountedFs& m, const json& req) {
  return json::parse(Control(m, req.dump()), nullptr, false);
}

std::string RefillRequest(const CacheIdentity& id) {
  return json{{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(id))}}.dump();
}

// One daemon on the shared bucket and prefix.
struct Node {
  std::unique_ptr<MountedFs> fs;
  explicit Node(const std::string& section) : fs(std::make_unique<MountedFs>(test::TestConfig() + section)) {}
  void Commit(int i) { REQUIRE(MountClient(fs->mnt()).Commit(KBlock(i), KPayload(i)) == 0); }
  void Evict(int i) {
    json r = Ctl(*fs, {{"op", "evict"}, {"path", AddressOf(KBlock(i)).RelativePath()}});
    REQUIRE(r["ok"] == true);
    REQUIRE_FALSE(IsHot(i));
  }
  bool IsHot(int i) const {
    struct stat st;
    return ::stat(MountClient(fs->mnt()).PathOf(KBlock(i)).c_str(), &st) == 0;
  }
  json Refill(int i) { return json::parse(Control(*fs, RefillRequest(KBlock(i))), nullptr, false); }
  json Report() { return Ctl(*fs, {{"op", "cold.report"}})["cold"]; }
  uint64_t Requests() { return Report()["requests"].get<uint64_t>(); }
  // The requests a refill of block i makes (its answer in `reply`).
  uint64_t RefillCounted(int i, json& reply) {
    uint64_t before = Requests();
    reply = Refill(i);
    return Requests() - before;  // cold.report itself makes no request
  }
  void ExpectHot(int i) {
    auto got = MountClient(fs->mnt()).Read(KBlock(i));
    REQUIRE(std::holds_alternative<Bytes>(got));
    CHECK(std::get<Bytes>(got) == KPayload(i));
  }
  void PackAll() {
    json r = Ctl(*fs, {{"op", "cold.pack"}});
    CAPTURE(r.dump());
    REQUIRE(r["ok"] == true);
    for (int i = 0; i < 5 && r["drain"]["pending"] != 0; i++) r = Ctl(*fs, {{"op", "cold.drain"}});
    REQUIRE(r["drain"]["pending"] == 0);
    REQUIRE(r["drain"]["failed"] == 0);
  }
};

struct Bucket {
  test::TempDir secrets;
  std::string prefix;
  std::string section;
  std::unique_ptr<S3Client> s3;
  explicit Bucket(const char* name, const std::string& extra = "") : prefix(UniquePrefix(name)) {
    auto env = RgwEnv();
    std::string creds = secrets.path() + "/s3.credentials";
    WriteCredentials(creds);
    section = ColdSection(env["GPUCACHE_S3_ENDPOINT"], creds, prefix, extra);
    s3 = Client(*ServerOptions());
  }
  // The block's sealed locator as it is in the bucket now.
  Locator LocatorOf(int i) {
    auto bytes = s3->Get(LocatorKey(prefix, AddressOf(KBlock(i))), kMaxLocatorBytes);
    REQUIRE(bytes.ok());
    std::optional<Locator> l = DecodeLocator(bytes.value());
    REQUIRE(l);
    return *l;
  }
  std::string PackOf(int i) { return PackKey(prefix, LocatorOf(i).object_digest); }
  // Until block i's locator is in the bucket (a write-back round packed it), up to 30 s.
  void WaitForLocator(int i) {
    std::string key = LocatorKey(prefix, AddressOf(KBlock(i)));
    for (int t = 0; t < 600 && !s3->Head(key).ok(); t++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(s3->Head(key).ok());
  }
};

}  // namespace

TEST_CASE("Cold known places: a block written back, or refilled once, refills with one GET") {
  REQUIRE_MESSAGE(!RgwEnv().empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  Bucket bucket("known-one-get");
  Node a(bucket.section);
  for (int i = 0; i < 3; i++) a.Commit(i);
  a.PackAll();
  CHECK(a.Report()["known_places"] == 3);
  for (int i = 0; i < 3; i++) {
    CAPTURE(i);
    a.Evict(i);
    json r;
    CHECK(a.RefillCounted(i, r) == 1);  // the pack's byte range, and nothing else
    CHECK(r["result"] == "hit");
    a.ExpectHot(i);
  }
  CHECK(a.Report()["refill_known"] == 3);
  CHECK(a.Report()["refill_known_fallbacks"] == 0);

  // Another node knows nothing: the locator, then the range; then it knows the place too.
  Node b(bucket.section);
  json r;
  CHECK(b.RefillCounted(1, r) == 2);
  CHECK(r["result"] == "hit");
  b.ExpectHot(1);
  b.Evict(1);
  CHECK(b.RefillCounted(1, r) == 1);
  CHECK(r["result"] == "hit");
  b.ExpectHot(1);
}

TEST_CASE("Cold known places: a pack deleted behind the node's back falls back to the locator") {
  REQUIRE(!RgwEnv().empty());
  Bucket bucket("known-deleted");
  Node a(bucket.section), b(bucket.section);
  a.Commit(0);
  a.Commit(1);
  a.PackAll();  // A's pack holds blocks 0 and 1, and A knows both places
  std::string a_pack = bucket.PackOf(0);
  // B packs block 0 (with block 2) into another pack and its locator now names B's.
  b.Commit(0);
  b.Commit(2);
  REQUIRE(bucket.s3->Delete(LocatorKey(bucket.prefix, AddressOf(KBlock(0)))).ok());
  b.PackAll();
  REQUIRE(bucket.PackOf(0) != a_pack);
  REQUIRE(bucket.s3->Delete(a_pack).ok());  // A's pack is gone; A still knows its places

  // Block 0: the known place is absent, the locator names B's pack: a hit, A's bytes.
  a.Evict(0);
  json r;
  CHECK(a.RefillCounted(0, r) == 3);  // the known range (404), the locator, its range
  CHECK(r["result"] == "hit");
  a.ExpectHot(0);
  CHECK(a.Report()["refill_known_fallbacks"] == 1);
  a.Evict(0);
  CHECK(a.RefillCounted(0, r) == 1);  // it learned B's place from the verified locator
  CHECK(r["result"] == "hit");

  // Block 1: its locator still names the deleted pack: missing, nothing served.
  a.Evict(1);
  CHECK(a.RefillCounted(1, r) == 3);
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "absent");
  CHECK_FALSE(a.IsHot(1));
  CHECK(a.Report()["refill_known_fallbacks"] == 2);
  CHECK(a.RefillCounted(1, r) == 2);  // the place was forgotten
  CHECK(r["result"] == "missing");
}

TEST_CASE("Cold known places: other bytes at the known pack's key are never served") {
  REQUIRE(!RgwEnv().empty());
  Bucket bucket("known-damaged");
  Node a(bucket.section);
  a.Commit(0);
  a.PackAll();
  Locator l = bucket.LocatorOf(0);
  std::string key = PackKey(bucket.prefix, l.object_digest);
  auto good = bucket.s3->Get(key, 1 << 30);
  REQUIRE(good.ok());
  Bytes bad = good.value();
  bad[l.offset + l.length / 2] ^= 0x01;  // one bit of block 0's payload
  REQUIRE(bucket.s3->Put(key, bad).ok());

  a.Evict(0);
  json r;
  CHECK(a.RefillCounted(0, r) == 3);  // the known range (corrupt), the locator, its range
  CAPTURE(r.dump());
  CHECK(r["result"] == "missing");
  CHECK(r["reason"] == "corrupt");
  CHECK_FALSE(a.IsHot(0));
  CHECK(a.Report()["refill_known_fallbacks"] == 1);

  REQUIRE(bucket.s3->Put(key, good.value()).ok());
  CHECK(a.RefillCounted(0, r) == 2);  // the place was forgotten: the locator decides
  CHECK(r["result"] == "hit");
  a.ExpectHot(0);
}

TEST_CASE("Cold known places: another tenant never uses a tenant's known place") {
  REQUIRE(!RgwEnv().empty());
  Bucket bucket("known-tenant");
  Node a(bucket.section);
  a.Commit(0);
  a.PackAll();
  a.Evict(0);
  // globex (uid 2000) asks for acme's block: refused before any request. (AsUser runs its
  // function in a child process: the answer comes back as its exit code.)
  uint64_t before = a.Requests();
  auto as_globex = [&](const CacheIdentity& id, const char* expect) {
    return test::AsUser(2000, 2000, [&] {
      return Control(*a.fs, RefillRequest(id)).find(expect) != std::string::npos ? 0 : 1;
    });
  };
  CHECK(as_globex(KBlock(0, "acme"), "\"EACCES\"") == 0);
  CHECK(a.Requests() == before);
  // globex's block with the very same chain: its own address, no place known; its (absent)
  // locator is asked and no pack is read.
  CHECK(as_globex(KBlock(0, "globex"), "\"missing\"") == 0);
  CHECK(a.Requests() == before + 1);
  CHECK(a.Report()["refill_known"] == 0);
  json r;
  CHECK(a.RefillCounted(0, r) == 1);  // acme's own refill still uses it
  CHECK(r["result"] == "hit");
}

TEST_CASE("Cold known places: with after-commit write-back a refilled block is not uploaded again") {
  REQUIRE(!RgwEnv().empty());
  Bucket bucket("known-writeback", "write_back = \"after-commit\"\nflush_interval = 0.05\n");
  Node a(bucket.section);
  a.Commit(0);
  bucket.WaitForLocator(0);
  a.Evict(0);
  json r = a.Refill(0);
  REQUIRE(r["result"] == "hit");
  // Block 1 is committed after the refill: once it is in the bucket, every write-back round
  // that could have packed the refilled block 0 has run.
  a.Commit(1);
  bucket.WaitForLocator(1);
  CHECK(a.Report()["packed_blocks"] == 2);  // block 0 once, block 1 once
}

// Review of stop 44: a block written back, then invalidated (unlinked) and committed again under
// the same identity with other bytes, was taken for known cold (only the identity was
// compared) and never packed; once evicted, a refill brought back the bytes it had replaced.
TEST_CASE("Cold known places: a block committed again with other bytes is written back again") {
  REQUIRE(!RgwEnv().empty());
  Bucket bucket("known-recommit", "write_back = \"after-commit\"\nflush_interval = 0.05\n");
  Node a(bucket.section);
  a.Commit(0);
  bucket.WaitForLocator(0);
  const Locator first = bucket.LocatorOf(0);
  MountClient client(a.fs->mnt());
  REQUIRE(::unlink(client.PathOf(KBlock(0)).c_str()) == 0);  // "this block is wrong"
  const Bytes replacement = KPayload(7);
  REQUIRE(client.Commit(KBlock(0), replacement) == 0);
  // Block 1 after it: once block 1 is in the bucket, the round that took block 0 has run.
  a.Commit(1);
  bucket.WaitForLocator(1);
  CHECK(a.Report()["packed_blocks"] == 3);
  CHECK(bucket.LocatorOf(0).checksum != first.checksum);
  a.Evict(0);
  json r = a.Refill(0);
  REQUIRE(r["result"] == "hit");
  auto got = client.Read(KBlock(0));
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == replacement);
}

// Review (2026-12-07): the daemon never told the cold tier of an unlink, so a refill brought
// the invalidated bytes back, and under manual write-back the block's old locator kept `cold
// pack` from ever packing the bytes committed in their place.
TEST_CASE("Cold invalidation: a block unlinked through the mount loses its cold copy, new bytes replace it") {
  REQUIRE(!RgwEnv().empty());
  Bucket bucket("invalidated", "write_back = \"manual\"\nflush_interval = 0.05\n");
  Node a(bucket.section);
  a.Commit(0);
  a.PackAll();
  MountClient client(a.fs->mnt());
  REQUIRE(::unlink(client.PathOf(KBlock(0)).c_str()) == 0);  // "this block is wrong"
  json r = a.Refill(0);
  CHECK(r["result"] == "missing");
  CHECK((r["reason"] == "invalidated" || r["reason"] == "absent"));  // before or after the round
  const std::string key = LocatorKey(bucket.prefix, AddressOf(KBlock(0)));
  for (int t = 0; t < 600 && bucket.s3->Head(key).ok(); t++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK_FALSE(bucket.s3->Head(key).ok());
  CHECK(a.Report()["locators_withdrawn"] == 1);
  const Bytes replacement = KPayload(7);
  REQUIRE(client.Commit(KBlock(0), replacement) == 0);
  a.PackAll();
  a.Evict(0);
  REQUIRE(a.Refill(0)["result"] == "hit");
  auto got = client.Read(KBlock(0));
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == replacement);
}

}  // namespace gpucache::cold
