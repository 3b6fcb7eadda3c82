#include "cold/manifest.h"

#include <doctest/doctest.h>

#include "cold/locator.h"
#include "cold/pack.h"
#include "tests/cold/cold_test_util.h"

namespace gpucache::cold {
using namespace testing;

TEST_CASE("Manifest: encode then decode gives the same manifest") {
  PackedPair p = MakePack(0, 5);
  DecodedManifest d = DecodeManifest(p.manifest);
  REQUIRE(d.error == ManifestError::kNone);
  CHECK(d.version == 4);
  CHECK(d.manifest.seals.size() == 1);
  CHECK(VerifyManifest(*TestKeyring(), d.manifest) == SealCheck::kOk);
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
  m[4] = 5;
  CHECK(DecodeManifest(m).error == ManifestError::kMalformed);
  m[4] = 3;  // v3 has no seal block: the seals are trailing bytes
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

TEST_CASE("Manifest: v4 seals are one per tenant, in order, and v3 decodes unsealed") {
  Manifest m = MakePack(0, 2).decoded;
  m.entries[1].address.tenant = "globex";
  SealManifest(m, *TestKeyring());
  REQUIRE(m.seals.size() == 2);
  CHECK(m.seals[0].tenant == "acme");
  CHECK(DecodeManifest(EncodeManifest(m)).manifest == m);
  Manifest swapped = m;
  std::swap(swapped.seals[0], swapped.seals[1]);
  CHECK(DecodeManifest(EncodeManifest(swapped)).error == ManifestError::kMalformed);
  Manifest one = m;
  one.seals.pop_back();
  CHECK(DecodeManifest(EncodeManifest(one)).error == ManifestError::kMalformed);
  Manifest v3 = m;
  v3.seals.clear();
  DecodedManifest d = DecodeManifest(EncodeManifest(v3));
  REQUIRE(d.error == ManifestError::kNone);
  CHECK(d.version == 3);
  CHECK(VerifyManifest(*TestKeyring(), d.manifest) == SealCheck::kUnsealed);
}

TEST_CASE("Locator: v2 round trip, v1 still decodes, anything else is refused") {
  PackedPair p = MakePack(0, 2);
  std::optional<Locator> l = DecodeLocator(p.locators[1]);
  REQUIRE(l);
  CHECK(l->version == 2);
  CHECK(l->address == p.decoded.entries[1].address);
  CHECK(l->object_digest == p.decoded.object_digest);
  CHECK(l->offset == p.decoded.entries[1].offset);
  CHECK(l->identity_digest == p.decoded.entries[1].identity_digest);
  CHECK(l->manifest_digest == p.manifest_digest);
  CHECK(EncodeLocator(*l) == p.locators[1]);
  CHECK(VerifyLocator(*TestKeyring(), *l) == SealCheck::kOk);
  for (size_t n = 0; n < p.locators[1].size(); n++) {
    std::vector<uint8_t> cut(p.locators[1].begin(), p.locators[1].begin() + n);
    CHECK_FALSE(DecodeLocator(cut));
  }
  std::vector<uint8_t> longer = p.locators[1];
  longer.push_back(0);
  CHECK_FALSE(DecodeLocator(longer));
  Sha256 d = ComputeSha256(std::vector<uint8_t>{1, 2, 3});
  std::vector<uint8_t> v1 = EncodeLegacyLocator(d);
  REQUIRE(DecodeLocator(v1));
  CHECK(DecodeLocator(v1)->version == 1);
  CHECK(DecodeLocator(v1)->manifest_digest == d);
  CHECK(VerifyLocator(*TestKeyring(), *DecodeLocator(v1)) == SealCheck::kUnsealed);
  std::vector<uint8_t> upper = v1;
  upper[upper.size() - 2] = 'A';
  CHECK_FALSE(DecodeLocator(upper));
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
  // The manifest's key is the digest of its body: the bytes before the seal block
  // (u8 count, then "acme", "k1" and a 32-byte MAC, each name length-prefixed).
  size_t seal_block = 1 + (1 + 4) + (1 + 2) + 32;
  std::span<const uint8_t> body(p.manifest.data(), p.manifest.size() - seal_block);
  CHECK(p.manifest_key == "gpucache/manifests/" + Sha256Hex(body));
  CHECK(ManifestDigestOfKey(kPrefix, p.manifest_key) == p.manifest_digest);
  CHECK_FALSE(ManifestDigestOfKey(kPrefix, p.object_key));
}

}  // namespace gpucache::cold
