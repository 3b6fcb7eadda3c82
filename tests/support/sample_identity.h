// Identities for tests: a valid base and helpers to vary it.
#pragma once

#include <bit>
#include <string>

#include "store/identity.h"

namespace gpucache::test {

inline Bytes Hash(uint8_t seed, size_t len = 16) {
  Bytes h(len);
  for (size_t i = 0; i < len; ++i) h[i] = static_cast<uint8_t>(seed * 31 + i);
  return h;
}

// A full 256-token block: parent hash + 16 unit hashes of 16 tokens each.
inline CacheIdentity SampleIdentity(std::string tenant = "acme", size_t units = 16) {
  CacheIdentity id;
  id.tenant = std::move(tenant);
  id.trust_domain = "prod";
  id.model_revision = "meta-llama/Llama-3.1-8B@5206a32";
  id.model_config_digest = "sha256:3f2a9c";
  id.tokenizer_revision = "llama3-tok@5206a32";
  id.kv_dtype = "bf16";
  id.quant_format = "none";
  id.layout_abi = "vllm-nhd-v1";
  id.tp_rank = 0;
  id.tp_size = 2;
  id.position_encoding = "rope";
  id.rope_theta_bits = std::bit_cast<uint64_t>(500000.0);
  id.rope_scaling = "llama3";
  id.rope_factor_bits = std::bit_cast<uint64_t>(8.0);
  id.rope_original_max_positions = 8192;
  id.block_capacity = 256;
  id.chain.push_back(Hash(0));  // parent
  for (size_t i = 1; i <= units; ++i) id.chain.push_back(Hash(static_cast<uint8_t>(i)));
  id.valid_length = static_cast<uint32_t>(units * 16);
  return id;
}

// Block k of SampleIdentity("acme")'s namespace (k = 0: SampleIdentity itself), told apart by
// its first unit hash.
inline CacheIdentity SampleBlock(int k = 0) {
  CacheIdentity id = SampleIdentity("acme");
  if (k != 0) id.chain[1] = Hash(static_cast<uint8_t>(100 + k));
  return id;
}

inline Bytes Payload(size_t size, uint8_t seed = 7) {
  Bytes b(size);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : b) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<uint8_t>(x >> 24);
  }
  return b;
}

}  // namespace gpucache::test
