// The shared vLLM block-hash vectors (tests/vectors/vllm_block_hashes.json), recomputed with a
// CBOR encoder of our own and libcrypto's SHA-256: a C++ engine adapter that hashes like vLLM
// (sha256_cbor) names the same gpucache blocks as the Python connector
// (clients/python/tests/test_vllm_hash.py checks the same file).
#include <doctest/doctest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "clients/cpp/identity_file.h"
#include "store/layout.h"

namespace gpucache {
namespace {

using nlohmann::json;

// Canonical CBOR (RFC 8949 4.2.1) of what vLLM hashes: byte strings, text strings, unsigned
// integers, arrays (Python tuples) and null. The head uses the shortest argument.
class Cbor {
 public:
  void Head(uint8_t major, uint64_t n) {
    uint8_t m = static_cast<uint8_t>(major << 5);
    if (n < 24) return Put(m | static_cast<uint8_t>(n));
    int bytes = n <= 0xff ? 1 : n <= 0xffff ? 2 : n <= 0xffffffffu ? 4 : 8;
    Put(m | static_cast<uint8_t>(bytes == 1 ? 24 : bytes == 2 ? 25 : bytes == 4 ? 26 : 27));
    for (int i = bytes - 1; i >= 0; --i) Put(static_cast<uint8_t>(n >> (8 * i)));
  }
  void Uint(uint64_t v) { Head(0, v); }
  void ByteString(const Bytes& b) {
    Head(2, b.size());
    out_.insert(out_.end(), b.begin(), b.end());
  }
  void Text(const std::string& s) {
    Head(3, s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void Array(size_t n) { Head(4, n); }
  void Null() { Put(0xf6); }
  const Bytes& bytes() const { return out_; }

 private:
  void Put(uint8_t b) { out_.push_back(b); }
  Bytes out_;
};

Bytes Sha256(const Bytes& in) {
  Bytes out(32);
  unsigned int n = 0;
  REQUIRE(EVP_Digest(in.data(), in.size(), out.data(), &n, EVP_sha256(), nullptr) == 1);
  return out;
}

Bytes Hex(const json& j) { return HexDecode(j.get<std::string>()).value(); }

// vLLM's extra keys for LoRA and cache salt, tagged: (("lora", name, path)?, ("cache_salt",
// salt)? on block 0 only), or null when there is neither.
void ExtraKeys(Cbor& c, const json& v, size_t block) {
  std::vector<std::vector<std::string>> keys;
  if (!v["lora_name"].is_null()) keys.push_back({"lora", v["lora_name"], v["lora_path"]});
  if (block == 0 && !v["cache_salt"].is_null()) keys.push_back({"cache_salt", v["cache_salt"]});
  if (keys.empty()) return c.Null();
  c.Array(keys.size());
  for (const auto& key : keys) {
    c.Array(key.size());
    for (const auto& k : key) c.Text(k);
  }
}

// CBOR((parent, tuple(tokens), extra_keys)) of engine block `block`.
Bytes BlockPreimage(const json& v, const Bytes& parent, size_t block) {
  size_t size = v["engine_block_size"];
  Cbor c;
  c.Array(3);
  c.ByteString(parent);
  c.Array(size);
  for (size_t i = 0; i < size; ++i) c.Uint(v["tokens"][block * size + i].get<uint64_t>());
  ExtraKeys(c, v, block);
  return c.bytes();
}

std::vector<Bytes> BlockHashes(const json& v, const Bytes& root) {
  std::vector<Bytes> out;
  size_t blocks = v["tokens"].size() / v["engine_block_size"].get<size_t>();
  for (size_t i = 0; i < blocks; ++i) out.push_back(Sha256(BlockPreimage(v, i ? out.back() : root, i)));
  return out;
}

json LoadVectors() {
  std::ifstream in(GPUCACHE_VLLM_VECTORS);
  REQUIRE(in.good());
  return json::parse(in);
}

TEST_CASE("vLLM hash vectors: sha256_cbor block hashes match") {
  const json vectors = LoadVectors();  // a named object: the loop's range must outlive it
  REQUIRE(vectors["cases"].size() >= 3);
  for (const auto& v : vectors["cases"]) {
    CAPTURE(v["name"].get<std::string>());
    Cbor seed;
    seed.Text(v["seed"]);
    Bytes root = Sha256(seed.bytes());  // vLLM's NONE_HASH for PYTHONHASHSEED=seed
    CHECK(HexEncode(root) == v["none_hash"].get<std::string>());
    CHECK(HexEncode(BlockPreimage(v, root, 0)) == v["first_block_cbor"].get<std::string>());
    std::vector<Bytes> hashes = BlockHashes(v, root);
    REQUIRE(hashes.size() == v["block_hashes"].size());
    for (size_t i = 0; i < hashes.size(); ++i) CHECK(HexEncode(hashes[i]) == v["block_hashes"][i].get<std::string>());
  }
}

TEST_CASE("vLLM hash vectors: gpucache chains and paths derive from the block hashes") {
  const json vectors = LoadVectors();  // a named object: the loop's range must outlive it
  REQUIRE(vectors["cases"].size() >= 3);
  for (const auto& v : vectors["cases"]) {
    CAPTURE(v["name"].get<std::string>());
    size_t per = v["block_tokens"].get<size_t>() / v["engine_block_size"].get<size_t>();
    Bytes root = Hex(v["none_hash"]);
    std::vector<Bytes> hashes;
    for (const auto& h : v["block_hashes"]) hashes.push_back(Hex(h));
    REQUIRE(v["blocks"].size() == hashes.size() / per);
    for (size_t j = 0; j < v["blocks"].size(); ++j) {
      const json& b = v["blocks"][j];
      // chain = [hash before the block (the root for block 0), the block's engine hashes].
      std::vector<Bytes> chain = {j ? hashes[j * per - 1] : root};
      chain.insert(chain.end(), hashes.begin() + j * per, hashes.begin() + (j + 1) * per);
      CacheIdentity id = IdentityFromJson(b["identity"]);
      CHECK(id.chain == chain);
      // The LoRA name as an identity name (docs/engine-integration.md, "Block hashes"): itself
      // when it is printable ASCII without space or "%", escaped otherwise.
      CHECK(id.adapter == v["adapter"].get<std::string>());
      std::string lora = v["lora_name"].is_null() ? "" : v["lora_name"].get<std::string>();
      bool plain = std::all_of(lora.begin(), lora.end(), [](char c) { return c > 0x20 && c < 0x7f && c != '%'; });
      CHECK((id.adapter == lora) == plain);
      CHECK(id.block_capacity == v["block_tokens"].get<uint32_t>());
      CHECK(AddressOf(id).RelativePath() == b["path"].get<std::string>());
    }
  }
}

}  // namespace
}  // namespace gpucache
