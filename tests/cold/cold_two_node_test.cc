// Two daemons on one bucket against the real gateway (ctest fixture cold_rgw; issue 16): node A
// commits and writes back, node B (its own data directory and mount, the same bucket, prefix
// and keyring) refills byte-identical. A third writer holding the bucket's credential but not
// the cluster secret PUTs forged objects with the right checksums; B refuses and counts them.
// Key rotation runs across both nodes with SIGHUP and `gpucachectl cold reseal`.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cold/locator.h"
#include "cold/pack.h"
#include "cold/s3_client.h"
#include "tests/cold/rgw_support.h"
#include "tests/mount/mount_helpers.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;
using test::Control;
using test::MountedFs;

namespace {

CacheIdentity NodeBlock(int i) {
  CacheIdentity id = test::SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(150 + i));
  return id;
}

Bytes NodePayload(int i) {
  Bytes b = test::Payload(16 * 1024 + i * 4096, static_cast<uint8_t>(i + 7));
  b[0] = static_cast<uint8_t>(i);
  return b;
}

json Ctl(const MountedFs& m, const json& req) {
  return json::parse(Control(m, req.dump()), nullptr, false);
}

json Refill(const MountedFs& m, int i) {
  return Ctl(m, {{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(NodeBlock(i)))}});
}

bool IsHot(const MountedFs& m, int i) {
  struct stat st;
  return ::stat(MountClient(m.mnt()).PathOf(NodeBlock(i)).c_str(), &st) == 0;
}

// cold.pack, draining again while a warming gateway left a job pending.
void PackAll(const MountedFs& m) {
  json r = Ctl(m, {{"op", "cold.pack"}});
  CAPTURE(r.dump());
  REQUIRE(r["ok"] == true);
  for (int i = 0; i < 5 && r["drain"]["pending"] != 0; i++) r = Ctl(m, {{"op", "cold.drain"}});
  REQUIRE(r["drain"]["pending"] == 0);
  REQUIRE(r["drain"]["failed"] == 0);
}

// What the third writer PUTs for block i: a consistent pack, manifest and locator carrying
// `bytes`, sealed under a key id the nodes know but a secret they do not (or, `unsealed`, in
// the pre-seal format: a v1 locator naming a v3 manifest).
void Forge(S3Client& s3, const std::string& prefix, int i, const Bytes& bytes, bool unsealed) {
  PackBuilder forger(prefix, Keyring::Of({{"k1", Bytes(32, 0x66)}}, "k1"));
  forger.Add(AddressOf(NodeBlock(i)), EncodePhysicalKey(NodeBlock(i)), bytes);
  PackedPair f = forger.Build(1);
  REQUIRE(s3.Put(f.object_key, f.object).ok());
  std::string lkey = LocatorKey(prefix, AddressOf(NodeBlock(i)));
  if (unsealed) {
    Manifest v3 = f.decoded;
    v3.seals.clear();
    std::vector<uint8_t> m = EncodeManifest(v3);
    REQUIRE(s3.Put(ManifestKey(prefix, ComputeSha256(m)), m).ok());
    REQUIRE(s3.Put(lkey, EncodeLegacyLocator(ComputeSha256(m))).ok());
  } else {
    REQUIRE(s3.Put(f.manifest_key, f.manifest).ok());
    REQUIRE(s3.Put(lkey, f.locators[0]).ok());
  }
}

// Sends SIGHUP and waits for the daemon to log the keyring reload.
void ReloadKeyring(const MountedFs& m) {
  auto count = [&] {
    std::string log = m.Log();
    size_t n = 0;
    for (size_t p = 0; (p = log.find("keyring reloaded", p)) != std::string::npos; p++) n++;
    return n;
  };
  size_t before = count();
  REQUIRE(::kill(m.pid(), SIGHUP) == 0);
  for (int i = 0; i < 100 && count() == before; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(count() > before);
}

}  // namespace

TEST_CASE("Cold: two nodes on one bucket: B refills what A packed and refuses a third writer's forgeries") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  test::TempDir secrets;
  std::string creds = secrets.path() + "/s3.credentials";
  WriteCredentials(creds);
  std::string prefix = UniquePrefix("twonode");
  std::string section = ColdSection(env["GPUCACHE_S3_ENDPOINT"], creds, prefix);
  MountedFs a(test::TestConfig() + section);
  MountedFs b(test::TestConfig() + section);
  REQUIRE(a.data() != b.data());
  constexpr int kBlocks = 10;
  for (int i = 0; i < kBlocks; i++) {
    REQUIRE(MountClient(a.mnt()).Commit(NodeBlock(i), NodePayload(i)) == 0);
  }
  PackAll(a);

  // B never saw these blocks; it finds each through its locator and gets A's bytes.
  for (int i = 0; i < kBlocks - 2; i++) {
    CAPTURE(i);
    REQUIRE_FALSE(IsHot(b, i));
    json r = Refill(b, i);
    REQUIRE(r["ok"] == true);
    CHECK(r["result"] == "hit");
    auto got = MountClient(b.mnt()).Read(NodeBlock(i));
    REQUIRE(std::holds_alternative<Bytes>(got));
    CHECK(std::get<Bytes>(got) == NodePayload(i));
  }

  // The third writer: plain S3 PUTs with the shared credential.
  auto s3 = Client(*ServerOptions());
  REQUIRE(s3);
  Forge(*s3, prefix, kBlocks - 2, Bytes(NodePayload(kBlocks - 2).size(), 0x66), false);
  Forge(*s3, prefix, kBlocks - 1, Bytes(NodePayload(kBlocks - 1).size(), 0x66), true);
  json forged = Refill(b, kBlocks - 2);
  CAPTURE(forged.dump());
  CHECK(forged["result"] == "missing");
  CHECK(forged["reason"] == "bad-seal");
  json unsealed = Refill(b, kBlocks - 1);
  CHECK(unsealed["result"] == "missing");
  CHECK(unsealed["reason"] == "unsealed");
  CHECK_FALSE(IsHot(b, kBlocks - 2));
  CHECK_FALSE(IsHot(b, kBlocks - 1));

  json report = Ctl(b, {{"op", "cold.report"}});
  CAPTURE(report.dump());
  CHECK(report["cold"]["refill_hits"] == kBlocks - 2);
  CHECK(report["cold"]["refill_bad_seal"] == 1);
  CHECK(report["cold"]["refill_unsealed"] == 1);
  CHECK(report["cold"]["refill_unknown_key"] == 0);
}

TEST_CASE("Cold: key rotation across two nodes: reseal with gpucachectl, then the old key can go") {
  auto env = RgwEnv();
  REQUIRE(!env.empty());
  test::TempDir secrets_a, secrets_b;
  std::string creds_a = secrets_a.path() + "/s3.credentials";
  std::string creds_b = secrets_b.path() + "/s3.credentials";
  WriteCredentials(creds_a);
  WriteCredentials(creds_b);
  std::string prefix = UniquePrefix("rotate");
  MountedFs a(test::TestConfig() + ColdSection(env["GPUCACHE_S3_ENDPOINT"], creds_a, prefix));
  MountedFs b(test::TestConfig() + ColdSection(env["GPUCACHE_S3_ENDPOINT"], creds_b, prefix));
  for (int i = 0; i < 4; i++) REQUIRE(MountClient(a.mnt()).Commit(NodeBlock(i), NodePayload(i)) == 0);
  PackAll(a);  // sealed under k1

  // Rotate: both nodes get k2; A makes it current and re-seals what is there.
  std::string k2 = "key.k2 = " + std::string(64, '2') + "\n";
  WriteKeyring(secrets_a.path() + "/keyring", TestKeyringText("k2", k2));
  WriteKeyring(secrets_b.path() + "/keyring", TestKeyringText("k1", k2));
  ReloadKeyring(a);
  ReloadKeyring(b);
  REQUIRE(Refill(b, 0)["result"] == "hit");  // k1 objects stay readable during the rotation
  int rc = 0;
  std::string out = Run(std::string(GPUCACHECTL_BIN) + " cold reseal " + a.mnt() + " --json", &rc);
  CAPTURE(out);
  REQUIRE(rc == 0);
  json r = json::parse(out, nullptr, false);
  CHECK(r["manifests_resealed"] == 1);
  CHECK(r["locators_resealed"] == 4);
  CHECK(r["refused"].empty());

  // k1 leaves B's keyring: everything is under k2 now, so B still refills every block.
  WriteKeyring(secrets_b.path() + "/keyring", "current = k2\n" + k2);
  ReloadKeyring(b);
  for (int i = 1; i < 4; i++) {
    CAPTURE(i);
    json hit = Refill(b, i);
    CHECK(hit["result"] == "hit");
    auto got = MountClient(b.mnt()).Read(NodeBlock(i));
    REQUIRE(std::holds_alternative<Bytes>(got));
    CHECK(std::get<Bytes>(got) == NodePayload(i));
  }
  CHECK(Ctl(b, {{"op", "cold.report"}})["cold"]["refill_unknown_key"] == 0);
}

}  // namespace gpucache::cold
