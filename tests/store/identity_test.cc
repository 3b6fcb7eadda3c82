#include "store/identity.h"

#include <doctest/doctest.h>

#include "store/entry_name.h"
#include "store/layout.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

using test::Hash;
using test::SampleIdentity;

TEST_CASE("Identity: physical key round-trips every field") {
  CacheIdentity id = SampleIdentity();
  id.adapter = "lora:support-bot@3";
  id.multimodal = Multimodal{"qwen2-vl-proc@1", Hash(9, 32)};
  Bytes k = EncodePhysicalKey(id);
  auto back = DecodePhysicalKey(k);
  REQUIRE(back.ok());
  CHECK(back.value() == id);
  CHECK(EncodePhysicalKey(back.value()) == k);
}

TEST_CASE("Identity: keys start with their versioned magic") {
  Bytes l = EncodeLogicalKey(SampleIdentity());
  Bytes k = EncodePhysicalKey(SampleIdentity());
  CHECK(std::string(l.begin(), l.begin() + 4) == "GPCL");
  CHECK(std::string(k.begin(), k.begin() + 4) == "GPCK");
  CHECK(l[4] == 1);
  CHECK(l[5] == 0);
  // GPCK embeds GPCL, length-delimited, right after its own header.
  CHECK(std::equal(l.begin(), l.end(), k.begin() + 10));
}

TEST_CASE("Identity: decoder rejects every truncation and any trailing byte") {
  Bytes k = EncodePhysicalKey(SampleIdentity());
  for (size_t n = 0; n < k.size(); ++n) {
    CHECK_FALSE(DecodePhysicalKey(std::span(k.data(), n)).ok());
  }
  k.push_back(0);
  CHECK_FALSE(DecodePhysicalKey(k).ok());
}

TEST_CASE("Identity: decoder rejects a wrong version and a wrong magic") {
  Bytes k = EncodePhysicalKey(SampleIdentity());
  Bytes bad_version = k;
  bad_version[4] = 2;
  CHECK_FALSE(DecodePhysicalKey(bad_version).ok());
  Bytes bad_magic = k;
  bad_magic[0] = 'X';
  CHECK_FALSE(DecodePhysicalKey(bad_magic).ok());
}

TEST_CASE("Identity: decoder refuses a well-formed encoding of an invalid identity") {
  CacheIdentity id = SampleIdentity();
  id.valid_length = id.block_capacity + 1;  // Encode does not validate; Decode must
  CHECK_FALSE(DecodePhysicalKey(EncodePhysicalKey(id)).ok());
}

TEST_CASE("Identity: validation bounds") {
  CHECK(Validate(SampleIdentity()) == StatusCode::kOk);
  auto bad = [](auto mutate) {
    CacheIdentity id = SampleIdentity();
    mutate(id);
    return Validate(id) == StatusCode::kInvalidArgument && !ValidationError(id).empty();
  };
  CHECK(bad([](CacheIdentity& i) { i.valid_length = 0; }));
  CHECK(bad([](CacheIdentity& i) { i.valid_length = 257; }));
  CHECK(bad([](CacheIdentity& i) { i.chain.clear(); }));
  CHECK(bad([](CacheIdentity& i) { i.chain.assign(129, Hash(1)); }));
  CHECK(bad([](CacheIdentity& i) { i.chain[0] = Hash(1, 7); }));
  CHECK(bad([](CacheIdentity& i) { i.chain[0] = Hash(1, 65); }));
  CHECK(bad([](CacheIdentity& i) { i.tenant = "Acme"; }));
  CHECK(bad([](CacheIdentity& i) { i.tenant = "../etc"; }));
  CHECK(bad([](CacheIdentity& i) { i.tenant = ""; }));
  CHECK(bad([](CacheIdentity& i) { i.tenant = std::string(65, 'a'); }));
  CHECK(bad([](CacheIdentity& i) { i.model_revision = "has space"; }));
  CHECK(bad([](CacheIdentity& i) { i.model_revision = std::string("nul\0x", 5); }));
  CHECK(bad([](CacheIdentity& i) { i.kv_dtype = std::string(257, 'x'); }));
  CHECK(bad([](CacheIdentity& i) { i.tp_rank = 2; }));
  CHECK(bad([](CacheIdentity& i) { i.pp_size = 0; }));
  CHECK(bad([](CacheIdentity& i) { i.block_capacity = 0; }));
  CHECK(bad([](CacheIdentity& i) { i.multimodal = Multimodal{"", Hash(1)}; }));
  CHECK_FALSE(bad([](CacheIdentity& i) { i.adapter = ""; }));  // no adapter is fine
}

TEST_CASE("Identity: a maximal identity stays far below one xattr value") {
  CacheIdentity id = SampleIdentity();
  id.chain.assign(kMaxChainLength, Bytes(kMaxHashLength, 0xab));
  id.model_revision = std::string(kMaxNameLength, 'm');
  REQUIRE(Validate(id) == StatusCode::kOk);
  CHECK(EncodePhysicalKey(id).size() < 16 * 1024);
}

TEST_CASE("Identity: every byte-affecting field changes the physical key") {
  const Bytes base = EncodePhysicalKey(SampleIdentity());
  auto differs = [&](auto mutate) {
    CacheIdentity id = SampleIdentity();
    mutate(id);
    return EncodePhysicalKey(id) != base;
  };
  CHECK(differs([](CacheIdentity& i) { i.kv_dtype = "fp16"; }));
  CHECK(differs([](CacheIdentity& i) { i.quant_format = "fp8"; }));
  CHECK(differs([](CacheIdentity& i) { i.layout_abi = "hnd"; }));
  CHECK(differs([](CacheIdentity& i) { i.tp_rank = 1; }));
  CHECK(differs([](CacheIdentity& i) { i.pp_size = 2; }));
  CHECK(differs([](CacheIdentity& i) { i.rope_theta_bits ^= 1; }));
  CHECK(differs([](CacheIdentity& i) { i.rope_factor_bits ^= 1; }));
  CHECK(differs([](CacheIdentity& i) { i.position_encoding = "alibi"; }));
  CHECK(differs([](CacheIdentity& i) { i.block_capacity = 512; }));
  CHECK(differs([](CacheIdentity& i) { i.trust_domain = "dev"; }));
  CHECK(differs([](CacheIdentity& i) { i.adapter = "lora:x"; }));
}

TEST_CASE("Identity: renders as one readable line") {
  std::string text = RenderIdentity(SampleIdentity());
  CHECK(text.find('\n') == std::string::npos);
  CHECK(text.find("tenant=acme") != std::string::npos);
  CHECK(text.find("rope_theta=500000") != std::string::npos);
  CHECK(text.find("tp=0/2") != std::string::npos);
  CHECK(text.find("chain=17:") != std::string::npos);
}

TEST_CASE("Layout: path is a pure function of the physical key") {
  CacheIdentity a = SampleIdentity();
  BlockAddress addr = AddressOf(a);
  CHECK(addr == AddressOf(SampleIdentity()));
  CHECK(IsValidNamespaceName(addr.ns));
  CHECK(IsValidBlockName(addr.block));
  CHECK(addr.ns.rfind("Llama-3.1-8B.bf16.tp0of2.pp0of1-", 0) == 0);

  CacheIdentity shorter = SampleIdentity("acme", 8);  // same namespace, other block
  CHECK(AddressOf(shorter).ns == addr.ns);
  CHECK(AddressOf(shorter).block != addr.block);

  CacheIdentity other_dtype = SampleIdentity();
  other_dtype.kv_dtype = "fp16";
  CHECK(AddressOf(other_dtype).ns != addr.ns);
}

TEST_CASE("Layout: ParseEntryName splits a reservation's suffix off, and nothing else") {
  CHECK(ParseEntryName("abc.part").block == "abc");
  CHECK(ParseEntryName("abc.part").part);
  CHECK(ParseEntryName("abc").block == "abc");
  CHECK_FALSE(ParseEntryName("abc").part);
  CHECK(ParseEntryName("a.part.part").block == "a.part");  // one suffix only
  CHECK(ParseEntryName("a.part.part").part);
  CHECK(ParseEntryName(".part").block == ".part");  // no block name before it
  CHECK_FALSE(ParseEntryName(".part").part);
  CHECK_FALSE(ParseEntryName("abc.par").part);
  CHECK_FALSE(ParseEntryName("").part);
}

TEST_CASE("Layout: name checks refuse hostile names") {
  CHECK_FALSE(IsValidBlockName("../../etc/passwd"));
  CHECK_FALSE(IsValidBlockName(std::string(32, 'A')));  // upper-case hex is not canonical
  CHECK_FALSE(IsValidBlockName(std::string(31, 'a')));
  CHECK(IsValidBlockName(std::string(32, 'a')));
  std::string hex(32, '0');
  CHECK(IsValidNamespaceName("m.bf16.tp0of1.pp0of1-" + hex));
  CHECK_FALSE(IsValidNamespaceName(".hidden-" + hex));
  CHECK_FALSE(IsValidNamespaceName("a/b-" + hex));
  CHECK_FALSE(IsValidNamespaceName("ab" + hex));
  CHECK_FALSE(IsValidNamespaceName("-" + hex));
  CHECK_FALSE(IsValidNamespaceName(std::string(200, 'a') + "-" + hex));
}

TEST_CASE("Identity: hex helpers") {
  CHECK(HexEncode(Bytes{0x00, 0xff, 0x1a}) == "00ff1a");
  CHECK(HexDecode("00ff1A") == Bytes{0x00, 0xff, 0x1a});
  CHECK_FALSE(HexDecode("0").has_value());
  CHECK_FALSE(HexDecode("zz").has_value());
}

}  // namespace
}  // namespace gpucache
