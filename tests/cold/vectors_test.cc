// The cold formats' test vectors (tests/vectors/cold_pack.json, docs/cold-format.md): a fixed
// pack of two blocks, byte for byte, sealed under a fixed test key (the key's secret and the
// derived tenant key are in the file, so another implementation can check its seals). Any change to the pack, manifest, locator or key format
// fails here first. GPUCACHE_REGENERATE_VECTORS=1 rewrites the file (and the fuzz seeds) after
// an intended format change; review the diff.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cold/locator.h"
#include "cold/pack.h"
#include "tests/cold/cold_test_util.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

namespace {

json Vectors(const PackedPair& p) {
  json entries = json::array();
  for (const ManifestEntry& e : p.decoded.entries) {
    entries.push_back({{"path", e.address.RelativePath()},
                       {"identity_sha256", HexEncode(e.identity_digest)},
                       {"offset", e.offset}, {"length", e.length},
                       {"checksum_xxh3_128", HexEncode(e.checksum)},
                       {"locator_key", LocatorKey(kPrefix, e.address)},
                       {"locator_hex", HexEncode(p.locators[entries.size()])}});
  }
  return json{{"prefix", kPrefix},
              {"seal_key_id", "k1"},
              {"seal_cluster_secret_hex", HexEncode(SecretOf(1))},
              {"seal_tenant_key_acme_hex", HexEncode(DeriveTenantKey(SecretOf(1), "acme"))},
              {"identities_gpck_hex", {HexEncode(EncodePhysicalKey(NthIdentity(0))),
                                       HexEncode(EncodePhysicalKey(NthIdentity(1)))}},
              {"object_hex", HexEncode(p.object)},
              {"object_key", p.object_key},
              {"manifest_hex", HexEncode(p.manifest)},
              {"manifest_key", p.manifest_key},
              {"manifest_body_sha256", HexEncode(p.manifest_digest)},
              {"entries", entries}};
}

void WriteSeed(const std::string& name, const std::vector<uint8_t>& bytes) {
  std::string dir = std::string(GPUCACHE_SOURCE_DIR) + "/tests/fuzz/corpus/manifest";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace

TEST_CASE("Cold vectors: a fixed two-block pack matches tests/vectors/cold_pack.json") {
  PackedPair p = MakePack(0, 2, 100);
  json got = Vectors(p);
  std::string path = std::string(GPUCACHE_SOURCE_DIR) + "/tests/vectors/cold_pack.json";
  if (std::getenv("GPUCACHE_REGENERATE_VECTORS")) {
    std::ofstream(path) << got.dump(2) << "\n";
    WriteSeed("v4-two-entries", p.manifest);
    Manifest unsealed = p.decoded;
    unsealed.seals.clear();
    WriteSeed("v3-two-entries", EncodeManifest(unsealed));
    std::vector<uint8_t> legacy = EncodeManifest(unsealed);
    legacy[4] = 2;
    WriteSeed("legacy-v2", legacy);
    WriteSeed("locator", EncodeLegacyLocator(p.manifest_digest));
    WriteSeed("locator-v2", p.locators[0]);
  }
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), path << " missing: run with GPUCACHE_REGENERATE_VECTORS=1");
  json want = json::parse(in);
  CHECK(got == want);
  // The vectors decode as documented.
  auto manifest = HexDecode(want["manifest_hex"].get<std::string>());
  REQUIRE(manifest);
  DecodedManifest d = DecodeManifest(*manifest);
  REQUIRE(d.error == ManifestError::kNone);
  CHECK(d.version == 4);
  CHECK(d.manifest.entries.size() == 2);
  CHECK(want["manifest_key"] == std::string(kPrefix) + "manifests/" + HexEncode(d.body_digest));
  CHECK(VerifyManifest(*TestKeyring(), d.manifest) == SealCheck::kOk);
  for (const auto& e : want["entries"]) {
    auto bytes = HexDecode(e["locator_hex"].get<std::string>());
    REQUIRE(bytes);
    std::optional<Locator> l = DecodeLocator(*bytes);
    REQUIRE(l);
    CHECK(VerifyLocator(*TestKeyring(), *l) == SealCheck::kOk);
    CHECK(l->manifest_digest == d.body_digest);
  }
}

}  // namespace gpucache::cold
