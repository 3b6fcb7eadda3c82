#include "cold/manifest.h"

#include <doctest/doctest.h>

#include "cold/pack.h"
#include "tests/cold/cold_test_util.h"

namespace gpucache::cold {
using namespace testing;

TEST_CASE("Manifest: encode then decode gives the same manifest") {
  PackedPair p = MakePack(0, 5);
  DecodedManifest d = DecodeManifest(p.manifest);
  REQUIRE(d.error == ManifestError::kNone);
  CHECK(d.version == 3);
  CHECK(d.manifest == p.decoded);
  CHECK(d.manifest.entries.size() == 5);
  CHECK(EncodeManifest(d.manifest) == p.manifest);
}

TEST_CASE("Manifest: every truncation and every extra byte is refused") {
  PackedPair p = MakePack(0, 2);
  for (size_t n = 0; n < p.manifest.size(); n++) {
    std::vector<uint8_t> cut(p.manifest.begin(), p.manifest.begin() + n);
    CHECK(DecodeManifest(cut).error == ManifestError::kMalformed);
  }
  std::vector<uint8_t> longer = p.manifest;
  longer.push_back(0);
  CHECK(DecodeManifest(longer).error == ManifestError::kMalformed);
}

TEST_CASE("Manifest: v1 and v2 are legacy, other versions malformed") {
  PackedPair p = MakePack(0, 1);
  for (uint8_t v : {1, 2}) {
    std::vector<uint8_t> m = p.manifest;
    m[4] = v;
    DecodedManifest d = DecodeManifest(m);
    CHECK(d.error == ManifestError::kLegacy);
    CHECK(d.version == v);
  }
  std::vector<uint8_t> m = p.manifest;
  m[4] = 4;
  CHECK(DecodeManifest(m).error == ManifestError::kMalformed);
}

TEST_CASE("Manifest: ranges outside the object, overlapping or duplicated are refused") {
  Manifest base = MakePack(0, 2).decoded;
  auto refused = [](Manifest m) {
    return DecodeManifest(EncodeManifest(m)).error == ManifestError::kMalformed;
  };
  Manifest past = base;
  past.entries[1].length = past.object_size;
  CHECK(refused(past));
  Manifest overlap = base;
  overlap.entries[1].offset = overlap.entries[0].offset;
  CHECK(refused(overlap));
  Manifest dup = base;
  dup.entries[1].address = dup.entries[0].address;
  dup.entries[1].offset = dup.entries[0].offset + dup.entries[0].length;
  CHECK(refused(dup));
  Manifest bad_name = base;
  bad_name.entries[0].address.tenant = "../x";
  CHECK(refused(bad_name));
  Manifest wrap = base;
  wrap.entries[1].offset = UINT64_MAX - 1;
  CHECK(refused(wrap));
}

TEST_CASE("Manifest: locator round trip and strict decoding") {
  Sha256 d = ComputeSha256(std::vector<uint8_t>{1, 2, 3});
  std::vector<uint8_t> loc = EncodeLocator(d);
  CHECK(DecodeLocator(loc) == d);
  std::vector<uint8_t> upper = loc;
  upper[upper.size() - 2] = 'A';
  CHECK_FALSE(DecodeLocator(upper));
  loc.pop_back();
  CHECK_FALSE(DecodeLocator(loc));
}

TEST_CASE("Pack: ValidatePair accepts a built pair and catches any tampering") {
  PackedPair p = MakePack(0, 3);
  CHECK(ValidatePair(kPrefix, p) == "");
  PackedPair flipped = p;
  flipped.object.back() ^= 1;
  CHECK(ValidatePair(kPrefix, flipped) != "");
  PackedPair wrong_key = p;
  wrong_key.object_key += "x";
  CHECK(ValidatePair(kPrefix, wrong_key) != "");
  PackedPair manifest_flip = p;
  manifest_flip.manifest[40] ^= 1;
  CHECK(ValidatePair(kPrefix, manifest_flip) != "");
}

TEST_CASE("Pack: keys are content addresses under the prefix") {
  PackedPair p = MakePack(0, 1);
  CHECK(p.object_key == "gpucache/packs/" + Sha256Hex(p.object));
  CHECK(p.manifest_key == "gpucache/manifests/" + Sha256Hex(p.manifest));
  CHECK(ManifestDigestOfKey(kPrefix, p.manifest_key) == p.manifest_digest);
  CHECK_FALSE(ManifestDigestOfKey(kPrefix, p.object_key));
}

}  // namespace gpucache::cold
