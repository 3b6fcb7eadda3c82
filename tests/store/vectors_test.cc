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

// A valid identity file (as docs/examples/identity.toml) with the first `from` replaced by `to`.
std::string EditedExample(const std::string& from, const std::string& to) {
  std::string text =
      "tenant = \"default\"\ntrust_domain = \"prod\"\nmodel_revision = \"m@1\"\n"
      "model_config_digest = \"sha256:3f2a9c\"\ntokenizer_revision = \"t@1\"\nadapter = \"\"\n"
      "chain = [\"00112233445566778899aabbccddeeff\", \"0102030405060708\"]\nkv_dtype = \"bf16\"\n"
      "quant_format = \"none\"\nlayout_abi = \"vllm-nhd-v1\"\ntp_rank = 0\ntp_size = 2\npp_rank = 0\n"
      "pp_size = 1\nposition_encoding = \"rope\"\nrope_theta = 500000.0\nrope_scaling = \"none\"\n"
      "rope_factor = 1.0\nrope_original_max_positions = 0\nblock_capacity = 256\nvalid_length = 16\n";
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

TEST_CASE("Vectors: an identity file with a key it cannot mean is refused, not read as another block") {
  // Found by review: a misspelt key left its field at the default, so `tp_rnak = 1` named rank
  // 0's block (a put said "already present", a get served rank 0's KV); `tp_rank = true` read
  // as 1; a multimodal that was not a table, or a misspelt [multimodel], was dropped, naming
  // the text-only block.
  REQUIRE_NOTHROW(IdentityFromTomlString(EditedExample("tp_rank = 0", "tp_rank = 0")));
  CHECK_THROWS_WITH(IdentityFromTomlString(EditedExample("tp_rank = 0", "tp_rnak = 1")),
                    doctest::Contains("'tp_rnak': unknown key"));
  CHECK_THROWS_WITH(IdentityFromTomlString(EditedExample("tp_rank = 0", "tp_rank = true")),
                    doctest::Contains("tp_rank"));
  CHECK_THROWS_WITH(IdentityFromTomlString(EditedExample("tp_rank = 0", "tp_rank = 0\nmultimodal = \"image\"")),
                    doctest::Contains("multimodal"));
  CHECK_THROWS_WITH(
      IdentityFromTomlString(EditedExample("tp_rank = 0", "tp_rank = 0\n[multimodel]\nprocessor = \"p\"")),
      doctest::Contains("'multimodel': unknown key"));
  CHECK_THROWS_WITH(
      IdentityFromTomlString(EditedExample("tp_rank = 0", "tp_rank = 0\nrope_theta_bits = \"0x0000000000000000\"")),
      doctest::Contains("given twice"));
}

}  // namespace
}  // namespace gpucache
