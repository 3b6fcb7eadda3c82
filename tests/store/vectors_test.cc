// The shared test vectors (tests/vectors/identity.json): the Python client checks the same file.
#include <doctest/doctest.h>

#include <fstream>

#include "clients/cpp/identity_file.h"
#include "store/layout.h"

namespace gpucache {
namespace {

nlohmann::json LoadVectors() {
  std::ifstream in(GPUCACHE_VECTORS);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

TEST_CASE("Vectors: C++ encodings and paths match the committed vectors") {
  nlohmann::json vectors = LoadVectors();
  REQUIRE(vectors.size() >= 4);
  for (const auto& v : vectors) {
    CAPTURE(v["name"].get<std::string>());
    CacheIdentity id = IdentityFromJson(v["identity"]);
    CHECK(HexEncode(EncodeLogicalKey(id)) == v["gpcl_hex"].get<std::string>());
    CHECK(HexEncode(EncodePhysicalKey(id)) == v["gpck_hex"].get<std::string>());
    CHECK(v["xattr_hex"] == v["gpck_hex"]);  // the identity xattr is the canonical GPCK
    CHECK(AddressOf(id).RelativePath() == v["path"].get<std::string>());
    auto decoded = DecodePhysicalKey(*HexDecode(v["xattr_hex"].get<std::string>()));
    REQUIRE(decoded.ok());
    CHECK(decoded.value() == id);
    CHECK(IdentityFromJson(IdentityToJson(id)) == id);
  }
}

TEST_CASE("Vectors: identity files name the offending key") {
  nlohmann::json j = LoadVectors()[0]["identity"];
  j.erase("kv_dtype");
  CHECK_THROWS_WITH(IdentityFromJson(j), doctest::Contains("kv_dtype"));
  j = LoadVectors()[0]["identity"];
  j["valid_length"] = 100000;
  CHECK_THROWS_WITH(IdentityFromJson(j), doctest::Contains("valid_length"));
  CHECK_THROWS_WITH(IdentityFromTomlString("tenant = 3"), doctest::Contains("tenant"));
}

}  // namespace
}  // namespace gpucache
