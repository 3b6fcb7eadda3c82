// Seals, the keyring and key rotation (docs/cold-tier.md "Seals and the keyring", "Key
// rotation"; docs/cold-format.md; adr/0012), on the in-memory object store: a writer with the
// bucket's credential but not the cluster secret uploads consistent objects (right checksums,
// right identity digest, right content addresses) and none of them is served.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "cold/control.h"
#include "cold/locator.h"
#include "cold/ops.h"
#include "cold/refill.h"
#include "cold/sink.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"
#include "tests/support/temp_dir.h"

namespace gpucache::cold {
using namespace testing;

namespace {

const Principal kAcme{.tenants = {"acme"}};

Bytes Gpck(int i, std::string tenant = "acme") { return EncodePhysicalKey(NthIdentity(i, tenant)); }

// The bytes a forger wants served as acme's block 0.
Bytes ForgedPayload() { return Bytes(10000, 0x66); }

// A consistent pack for acme's block 0 with the forger's bytes, sealed under `keyring`.
PackedPair ForgedPack(std::shared_ptr<const Keyring> keyring) {
  PackBuilder b(kPrefix, std::move(keyring));
  b.Add(AddressOf(NthIdentity(0)), Gpck(0), ForgedPayload());
  return b.Build(1);
}

// A plain writer: PUTs every object of `p` (no sink, no validation).
void PutAll(MemoryObjectStore& s3, const PackedPair& p) {
  s3.Set(p.object_key, p.object);
  s3.Set(p.manifest_key, p.manifest);
  for (size_t i = 0; i < p.locators.size(); i++) {
    s3.Set(LocatorKey(kPrefix, p.decoded.entries[i].address), p.locators[i]);
  }
}

struct Bucket {
  MemoryObjectStore s3;
  PackedPair real = MakePack(0, 4, 10000);
  Bucket() {
    PutAll(s3, real);
    s3.ClearLog();
  }
};

std::shared_ptr<SealKeys> Keys(std::map<std::string, std::vector<uint8_t>> secrets, std::string current) {
  return std::make_shared<SealKeys>(Keyring::Of(std::move(secrets), std::move(current)));
}

std::string LocatorKeyId(MemoryObjectStore& s3, int i) {
  auto l = DecodeLocator(s3.Objects().at(LocatorKey(kPrefix, AddressOf(NthIdentity(i)))));
  return l ? l->seal.key_id : "";
}

}  // namespace

TEST_CASE("Seal: tenant keys differ per tenant and per secret, MACs bind domain, tenant and key id") {
  TenantKey acme = DeriveTenantKey(SecretOf(1), "acme");
  CHECK(acme == DeriveTenantKey(SecretOf(1), "acme"));
  CHECK(acme != DeriveTenantKey(SecretOf(1), "globex"));
  CHECK(acme != DeriveTenantKey(SecretOf(2), "acme"));
  Bytes msg{1, 2, 3};
  SealMac mac = ComputeSealMac(acme, "d", "acme", "k1", msg);
  CHECK(SealMacEqual(mac, ComputeSealMac(acme, "d", "acme", "k1", msg)));
  CHECK_FALSE(SealMacEqual(mac, ComputeSealMac(acme, "e", "acme", "k1", msg)));
  CHECK_FALSE(SealMacEqual(mac, ComputeSealMac(acme, "d", "acmf", "k1", msg)));
  CHECK_FALSE(SealMacEqual(mac, ComputeSealMac(acme, "d", "acme", "k2", msg)));
  CHECK_FALSE(SealMacEqual(mac, ComputeSealMac(acme, "d", "acme", "k1", Bytes{1, 2, 4})));
}

TEST_CASE("Keyring: the documented format parses, mistakes are refused without echoing a secret") {
  std::string k1 = HexEncode(SecretOf(1)), k2 = HexEncode(SecretOf(2));
  std::string why;
  auto k = Keyring::Parse("# rotation in progress\ncurrent = k2\nkey.k1 = " + k1 + "\n key.k2=" + k2 + " \n", &why);
  REQUIRE_MESSAGE(k, why);
  CHECK(k->current() == "k2");
  CHECK(k->ids() == std::vector<std::string>{"k1", "k2"});
  CHECK(k->TenantKeyOf("k1", "acme") == DeriveTenantKey(SecretOf(1), "acme"));
  CHECK_FALSE(k->TenantKeyOf("k3", "acme"));
  for (std::string bad : {"key.k1 = " + k1 + "\n",                           // no current
                          "current = k2\nkey.k1 = " + k1 + "\n",             // current not listed
                          "current = k1\nkey.k1 = " + k1.substr(0, 62) + "\n",  // 31 bytes
                          "current = k1\nkey.k1 = " + k1 + "\nkey.k1 = " + k2 + "\n",
                          "current = k1\nkey.k 1 = " + k1 + "\n", "current = k1\nsecret = " + k1 + "\n",
                          "current = k1\nkey.k1 = " + k1.substr(0, 63) + "g\n"}) {
    std::string e;
    CHECK_FALSE(Keyring::Parse(bad, &e));
    CHECK(e != "");
    CHECK(e.find(k1.substr(0, 16)) == std::string::npos);
  }
}

TEST_CASE("Keyring: the file must be private to its owner") {
  test::TempDir dir;
  std::string path = dir.path() + "/keyring";
  std::ofstream(path) << "current = k1\nkey.k1 = " << HexEncode(SecretOf(1)) << "\n";
  std::string why;
  chmod(path.c_str(), 0644);
  CHECK_FALSE(Keyring::Load(path, &why));
  CHECK(why.find("chmod 600") != std::string::npos);
  chmod(path.c_str(), 0600);
  CHECK(Keyring::Load(path, &why));
  CHECK_FALSE(Keyring::Load(dir.path(), &why));  // a directory
  CHECK(why.find("not a regular file") != std::string::npos);
  CHECK_FALSE(Keyring::Load(dir.path() + "/absent", &why));
  // A link is followed (secret volumes use them); its target is what is checked.
  std::string link = dir.path() + "/link";
  REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
  CHECK(Keyring::Load(link, &why));
  chmod(path.c_str(), 0640);
  CHECK_FALSE(Keyring::Load(link, &why));
}

TEST_CASE("Seal: forged objects with the right checksums are refused before a payload byte") {
  Bucket b;
  Refiller refiller{b.s3, kPrefix, {}, TestKeys()};
  REQUIRE(refiller.Fetch(kAcme, Gpck(0), 1 << 20).status == RefillStatus::kHit);
  b.s3.ClearLog();

  SUBCASE("no seal: a v1 locator and a v3 manifest") {
    PackedPair f = ForgedPack(TestKeyring());
    Manifest v3 = f.decoded;
    v3.seals.clear();
    std::vector<uint8_t> mbytes = EncodeManifest(v3);
    b.s3.Set(f.object_key, f.object);
    b.s3.Set(ManifestKey(kPrefix, ComputeSha256(mbytes)), mbytes);
    b.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(0))), EncodeLegacyLocator(ComputeSha256(mbytes)));
    RefillOutcome o = refiller.Fetch(kAcme, Gpck(0), 1 << 20);
    CHECK(o.reason == MissingReason::kUnsealed);
    CHECK(refiller.seal_refusals().unsealed == 1);
    // The documented rule: accept_unsealed serves unsealed objects, forged ones included.
    Refiller lenient{b.s3, kPrefix, {}, TestKeys(), true};
    RefillOutcome served = lenient.Fetch(kAcme, Gpck(0), 1 << 20);
    CHECK(served.status == RefillStatus::kHit);
    CHECK(served.payload == ForgedPayload());
    b.s3.ClearLog();
  }
  SUBCASE("a v2 locator sealed under the right key id with another secret") {
    PutAll(b.s3, ForgedPack(Keyring::Of({{"k1", SecretOf(66)}}, "k1")));
    b.s3.ClearLog();
    CHECK(refiller.Fetch(kAcme, Gpck(0), 1 << 20).reason == MissingReason::kBadSeal);
    CHECK(refiller.seal_refusals().bad_seal == 1);
  }
  SUBCASE("a v2 locator sealed with another tenant's key") {
    PackedPair f = ForgedPack(TestKeyring());
    Locator l = *DecodeLocator(f.locators[0]);
    TenantKey globex = DeriveTenantKey(SecretOf(1), "globex");  // what a globex writer holds
    l.seal.mac = ComputeSealMac(globex, kLocatorSealDomain, "acme", "k1", LocatorSealedPart(l));
    f.locators[0] = EncodeLocator(l);
    PutAll(b.s3, f);
    b.s3.ClearLog();
    CHECK(refiller.Fetch(kAcme, Gpck(0), 1 << 20).reason == MissingReason::kBadSeal);
    CHECK(refiller.seal_refusals().bad_seal == 1);
  }
  SUBCASE("a v2 locator sealed under a key id the keyring does not hold") {
    PutAll(b.s3, ForgedPack(Keyring::Of({{"mine", SecretOf(66)}}, "mine")));
    b.s3.ClearLog();
    CHECK(refiller.Fetch(kAcme, Gpck(0), 1 << 20).reason == MissingReason::kUnknownKey);
    CHECK(refiller.seal_refusals().unknown_key == 1);
  }
  SUBCASE("a genuine sealed locator of another block copied over this one") {
    b.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(0))),
             b.s3.Objects().at(LocatorKey(kPrefix, AddressOf(NthIdentity(1)))));
    b.s3.ClearLog();
    CHECK(refiller.Fetch(kAcme, Gpck(0), 1 << 20).reason == MissingReason::kBadSeal);
  }
  CHECK(b.s3.Count("GETRANGE") == 0);
  // Other blocks are unaffected.
  CHECK(refiller.Fetch(kAcme, Gpck(2), 1 << 20).payload == PayloadOf(2, 10000));
}

TEST_CASE("Seal: a forged manifest is neither followed nor reclaimed") {
  Bucket b;
  // A v1 locator (read under accept_unsealed) naming a v4 manifest whose seal is forged.
  PackedPair f = ForgedPack(Keyring::Of({{"k1", SecretOf(66)}}, "k1"));
  b.s3.Set(f.object_key, f.object);
  b.s3.Set(f.manifest_key, f.manifest);
  b.s3.Set(LocatorKey(kPrefix, AddressOf(NthIdentity(0))), EncodeLegacyLocator(f.manifest_digest));
  Refiller lenient{b.s3, kPrefix, {}, TestKeys(), true};
  CHECK(lenient.Fetch(kAcme, Gpck(0), 1 << 20).reason == MissingReason::kBadSeal);
  CHECK(b.s3.Count("GETRANGE") == 0);
  ColdOps ops(b.s3, kPrefix, {}, TestKeys());
  ReclaimReport r = ops.Reclaim(f.manifest_digest, UINT64_MAX, {.admin = true});
  CHECK(r.refused);
  CHECK(r.reason.find("bad-seal") != std::string::npos);
  CHECK(b.s3.Count("DELETE") == 0);
}

TEST_CASE("Rotation: new writes use the current key, old objects stay readable, reseal moves them") {
  MemoryObjectStore s3;
  auto keys = Keys({{"k1", SecretOf(1)}}, "k1");
  Sink sink(s3, kPrefix, {});
  auto upload = [&](PackedPair p) {
    REQUIRE(sink.Submit(std::move(p)).admission == Admission::kAccepted);
    REQUIRE(sink.Drain().uploaded == 1);
  };
  upload(MakePack(0, 3, 5000, "acme", keys->Get()));
  upload(MakePack(0, 2, 5000, "globex", keys->Get()));
  // Rotate: add k2 and make it current; k1 stays for reads.
  keys->Set(Keyring::Of({{"k1", SecretOf(1)}, {"k2", SecretOf(2)}}, "k2"));
  upload(MakePack(3, 2, 5000, "acme", keys->Get()));
  CHECK(LocatorKeyId(s3, 0) == "k1");
  CHECK(LocatorKeyId(s3, 3) == "k2");
  Refiller refiller{s3, kPrefix, {}, keys};
  for (int i = 0; i < 5; i++) {
    CHECK(refiller.Fetch(kAcme, Gpck(i), 1 << 20).payload == PayloadOf(i, 5000));
  }
  // Without k1, objects not yet resealed are unknown-key.
  Refiller k2_only{s3, kPrefix, {}, Keys({{"k2", SecretOf(2)}}, "k2")};
  CHECK(k2_only.Fetch(kAcme, Gpck(0), 1 << 20).reason == MissingReason::kUnknownKey);
  CHECK(k2_only.Fetch(kAcme, Gpck(3), 1 << 20).status == RefillStatus::kHit);

  // A forged object in the bucket is reported and never sealed.
  PackedPair forged = ForgedPack(Keyring::Of({{"k1", SecretOf(66)}}, "k1"));
  s3.Set(forged.manifest_key, forged.manifest);

  ColdOps ops(s3, kPrefix, {}, keys);
  ResealReport r = ops.Reseal(UINT64_MAX);
  CHECK_FALSE(r.error);
  CHECK(r.manifests_scanned == 4);
  CHECK(r.manifests_resealed == 2);  // acme's and globex's k1 packs
  CHECK(r.manifests_current == 1);
  CHECK(r.locators_resealed == 5);
  CHECK(r.locators_current == 2);
  REQUIRE(r.refused.size() == 1);
  CHECK(r.refused[0].find(forged.manifest_key) == 0);
  CHECK(s3.Objects().at(forged.manifest_key) == forged.manifest);
  CHECK(r.resume_after == "");
  CHECK(s3.Count("DELETE") == 0);

  // Everything is under k2 now: k1 can leave the keyring.
  for (int i = 0; i < 5; i++) {
    RefillOutcome o = k2_only.Fetch(kAcme, Gpck(i), 1 << 20);
    CHECK(o.payload == PayloadOf(i, 5000));
  }
  CHECK(k2_only.Fetch({.tenants = {"globex"}}, Gpck(1, "globex"), 1 << 20).status == RefillStatus::kHit);
  ColdOps k2_ops(s3, kPrefix, {}, Keys({{"k2", SecretOf(2)}}, "k2"));
  ResealReport again = k2_ops.Reseal(UINT64_MAX);
  CHECK(again.manifests_resealed == 0);
  CHECK(again.manifests_current == 3);
  CHECK(again.locators_resealed == 0);
}

TEST_CASE("Rotation: reseal stops at its byte budget and resumes where it stopped") {
  MemoryObjectStore s3;
  auto keys = Keys({{"k1", SecretOf(1)}}, "k1");
  for (int p = 0; p < 4; p++) PutAll(s3, MakePack(p * 2, 2, 1000, "acme", keys->Get()));
  keys->Set(Keyring::Of({{"k1", SecretOf(1)}, {"k2", SecretOf(2)}}, "k2"));
  ColdOps ops(s3, kPrefix, {}, keys);
  ResealReport first = ops.Reseal(1);  // spent after the first manifest
  CHECK(first.budget_reached);
  CHECK(first.manifests_resealed == 1);
  CHECK(first.locators_resealed == 2);
  REQUIRE(first.resume_after != "");
  size_t resealed = first.manifests_resealed;
  std::string after = first.resume_after;
  for (int round = 0; round < 10 && !after.empty(); round++) {
    ResealReport r = ops.Reseal(1, after);
    resealed += r.manifests_resealed;
    CHECK(r.manifests_current == 0);  // never walks a manifest twice
    after = r.resume_after;
  }
  CHECK(after == "");
  CHECK(resealed == 4);
  for (int i = 0; i < 8; i++) CHECK(LocatorKeyId(s3, i) == "k2");
}

TEST_CASE("Seal: the tier counts refusals, surfaces them as metrics, and reseal is an admin op") {
  MemoryObjectStore s3;
  MemoryStore hot;
  ColdTierOptions options;
  options.prefix = kPrefix;
  options.write_back = WriteBack::kManual;
  ColdTier tier(hot, s3, options, TestKeys());
  PutAll(s3, MakePack(0, 2, 1000));
  PutAll(s3, ForgedPack(Keyring::Of({{"k1", SecretOf(66)}}, "k1")));  // overwrites block 0's locator
  CHECK(tier.Refill(kAcme, Gpck(0), 1 << 20, {1000, 1000}).outcome.reason == MissingReason::kBadSeal);
  CHECK(tier.Refill(kAcme, Gpck(1), 1 << 20, {1000, 1000}).outcome.status == RefillStatus::kHit);
  CHECK_FALSE(hot.Stat(AddressOf(NthIdentity(0))).ok());
  ColdTierStats s = tier.Stats();
  CHECK(s.seal_refusals.bad_seal == 1);
  CHECK(s.refill_missing == 1);
  std::string metrics = RenderColdMetrics(s);
  CHECK(metrics.find("gpucache_cold_refill_bad_seal_total 1\n") != std::string::npos);
  CHECK(metrics.find("gpucache_cold_refill_unsealed_total 0\n") != std::string::npos);
  CHECK(metrics.find("gpucache_cold_refill_unknown_key_total 0\n") != std::string::npos);

  Principal member{.uid = 1000, .gid = 1000, .admin = false, .tenants = {"acme"}};
  CHECK(HandleColdRequest(tier, member, R"({"op":"cold.reseal"})").find("EACCES") != std::string::npos);
  Principal admin{.uid = 0, .gid = 0, .admin = true};
  CHECK(HandleColdRequest(tier, admin, R"({"op":"cold.reseal","budget":-1})").find("EINVAL") !=
        std::string::npos);
  std::string reply = HandleColdRequest(tier, admin, R"({"op":"cold.reseal"})");
  CHECK(reply.find("\"ok\":true") != std::string::npos);
  CHECK(reply.find("\"manifests_current\":1") != std::string::npos);  // the real one, under k1
  CHECK(reply.find("bad-seal") != std::string::npos);                 // the forged one, refused
}

}  // namespace gpucache::cold
