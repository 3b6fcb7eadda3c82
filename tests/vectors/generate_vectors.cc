// Writes tests/vectors/identity.json: identities with their GPCL/GPCK encodings, identity
// xattr value and relative path, as computed by the C++ implementation. Run once when the
// encoding changes on purpose (it never should within a version); the committed file is what
// both the C++ and the Python tests check against.
#include <bit>
#include <iostream>

#include "clients/cpp/identity_file.h"
#include "store/layout.h"
#include "tests/support/sample_identity.h"

using namespace gpucache;

int main() {
  std::vector<std::pair<std::string, CacheIdentity>> cases;
  cases.emplace_back("full block, tp 0 of 2", test::SampleIdentity());
  cases.emplace_back("partial block: 128 of 256 tokens", test::SampleIdentity("acme", 8));
  {
    CacheIdentity id = test::SampleIdentity("globex", 1);
    id.adapter = "lora:support-bot@3";
    id.multimodal = Multimodal{"qwen2-vl-processor@7", test::Hash(42, 32)};
    id.kv_dtype = "fp8_e4m3";
    id.quant_format = "fp8-per-tensor";
    id.pp_rank = 1;
    id.pp_size = 4;
    cases.emplace_back("adapter, multimodal, fp8, pipeline stage 1", id);
  }
  {
    CacheIdentity id = test::SampleIdentity("t0", 1);
    id.model_revision = "org/Qwen2.5-7B:Instruct@rev";  // ":" must become "_" in the slug
    id.position_encoding = "alibi";
    id.rope_theta_bits = 0;
    id.rope_scaling = "none";
    id.rope_factor_bits = std::bit_cast<uint64_t>(1.0);
    id.rope_original_max_positions = 0;
    id.block_capacity = 16;
    id.valid_length = 1;
    id.chain = {Bytes(8, 0), Bytes(64, 0xff)};
    cases.emplace_back("minimal lengths, unusual model name", id);
  }
  {
    CacheIdentity id = test::SampleIdentity("acme", 2);
    id.model_revision = "org/..hidden@x";  // the slug must not start with '.'
    cases.emplace_back("model name starting with a dot", id);
  }
  nlohmann::json out = nlohmann::json::array();
  for (auto& [name, id] : cases) {
    Bytes gpck = EncodePhysicalKey(id);
    out.push_back({{"name", name},
                   {"identity", IdentityToJson(id)},
                   {"gpcl_hex", HexEncode(EncodeLogicalKey(id))},
                   {"gpck_hex", HexEncode(gpck)},
                   {"xattr_hex", HexEncode(gpck)},
                   {"path", AddressOf(id).RelativePath()}});
  }
  std::cout << out.dump(2) << "\n";
}
