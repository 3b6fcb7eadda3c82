// CacheIdentity v1: everything that determines the bytes of a KV block.
//
// An identity names a block completely: two engines holding equal identities may share the
// block; any field that changes the bytes (dtype, quantization, layout, shard, RoPE, lengths)
// is part of it. Raw prompts, token ids and media are never fields: callers hash them first.
//
// The chain a block carries is bounded: chain[0] is the parent hash (which commits to every
// token before the block) and the following entries are the cumulative hashes of the hash
// units inside the block, each covering its predecessor. A 100k-token context therefore never
// makes a large identity.
//
// Encodings (docs/identity-encoding.md, test vectors in tests/vectors/identity.json):
//   GPCL  logical key:  tenant, trust domain, model, tokenizer, adapter, chain, multimodal.
//   GPCK  physical key: GPCL + dtype, quant, layout, shard, position encoding, RoPE, lengths.
// GPCK carries every field, so it is also the canonical identity: the value of the
// `user.gpucache.identity` xattr and the identity stored in a block file (adr/0002).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/status.h"

namespace gpucache {

using Bytes = std::vector<uint8_t>;

// Bounds that keep an identity a few KiB, far below the 64 KiB limit of one xattr value.
inline constexpr size_t kMaxTenantLength = 64;
inline constexpr size_t kMaxNameLength = 256;      // model revision, dtype, layout, ...
inline constexpr size_t kMinHashLength = 8;        // bytes per chain entry / digest
inline constexpr size_t kMaxHashLength = 64;
inline constexpr size_t kMaxChainLength = 128;     // parent + hash units in one block
inline constexpr uint32_t kMaxBlockTokens = 1u << 20;
inline constexpr uint32_t kMaxParallelSize = 1u << 16;
inline constexpr uint16_t kIdentityVersion = 1;

struct Multimodal {
  std::string processor;  // processor identity, e.g. "qwen2-vl-processor@rev"
  Bytes input_digest;     // digest of the media inputs the block's tokens depend on
  bool operator==(const Multimodal&) const = default;
};

struct CacheIdentity {
  // Logical fields (GPCL).
  std::string tenant;               // [a-z0-9_-], starts alphanumeric; also a directory name
  std::string trust_domain;         // who vouches for the producer, e.g. "prod"
  std::string model_revision;       // e.g. "meta-llama/Llama-3.1-8B@5206a32"
  std::string model_config_digest;  // e.g. "sha256:3f2a..."
  std::string tokenizer_revision;
  std::string adapter;              // LoRA/adapter identity; empty means none
  std::vector<Bytes> chain;         // [parent hash, unit hashes...], cumulative
  std::optional<Multimodal> multimodal;

  // Physical fields (GPCK adds these to GPCL).
  std::string kv_dtype;             // e.g. "bf16"
  std::string quant_format;         // e.g. "none", "fp8-e4m3-per-tensor"
  std::string layout_abi;           // e.g. "vllm-nhd-v1"
  uint32_t tp_rank = 0, tp_size = 1;
  uint32_t pp_rank = 0, pp_size = 1;
  std::string position_encoding;    // e.g. "rope"
  uint64_t rope_theta_bits = 0;     // IEEE-754 binary64 bits of the RoPE base
  std::string rope_scaling;         // e.g. "none", "llama3", "yarn"
  uint64_t rope_factor_bits = 0;    // IEEE-754 binary64 bits of the scaling factor
  uint32_t rope_original_max_positions = 0;
  uint32_t block_capacity = 0;      // tokens the block can hold
  uint32_t valid_length = 0;        // tokens actually in the block, 1..block_capacity

  bool operator==(const CacheIdentity&) const = default;
};

// Checks every bound and character rule; kInvalidArgument names nothing, so callers that
// want to tell a person why use ValidationError().
StatusCode Validate(const CacheIdentity& id);
// Empty when valid; otherwise a one-line reason naming the field.
std::string ValidationError(const CacheIdentity& id);

// True for a name usable as a tenant (and so as a top-level directory).
bool IsValidTenantName(std::string_view name);

// Canonical encodings. REQUIRES: Validate(id) == kOk.
Bytes EncodeLogicalKey(const CacheIdentity& id);   // GPCL
Bytes EncodePhysicalKey(const CacheIdentity& id);  // GPCK == canonical identity
// Strict decoder of GPCK: wrong magic or version, a length past the end, trailing bytes or an
// identity that fails Validate() are all kInvalidArgument. Input is hostile.
Result<CacheIdentity> DecodePhysicalKey(std::span<const uint8_t> bytes);
// Why DecodePhysicalKey refuses `bytes`, in one line naming the check or field; empty if it
// does not.
std::string DescribeIdentityError(std::span<const uint8_t> bytes);

// The same identity with every byte-affecting field kept but the per-block fields dropped:
// equal for blocks that live in one namespace directory.
Bytes EncodeNamespaceFields(const CacheIdentity& id);  // GPCN
Bytes EncodeBlockFields(const CacheIdentity& id);      // GPCE: chain, valid length, multimodal

// One line of key=value pairs a person can read (used by xattrs and gpucachectl).
std::string RenderIdentity(const CacheIdentity& id);

std::string HexEncode(std::span<const uint8_t> bytes);
std::optional<Bytes> HexDecode(std::string_view hex);

}  // namespace gpucache
