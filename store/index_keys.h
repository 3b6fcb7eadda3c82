// What the in-memory index keeps of a committed block's identity: fixed-size digests of the
// parts that lookups, prefix matching and eviction compare. The identity itself (several
// hundred bytes once encoded, a few KiB decoded) stays in the medium: the block file's header,
// which every open re-reads anyway.
//
// A digest stands for bytes only where a 64-bit collision could at worst mislabel a miss
// (incompatible instead of absent) or pick a prefix candidate that the open then refuses:
// every open checks that the header's identity names the block's address (a digest of every
// identity field) before serving a byte. The index itself keeps all but `identity` (which the
// address stands for) and `block_capacity` (its namespace's): store/block_index.h.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "store/identity.h"

namespace gpucache {

struct IndexKeys {
  uint64_t identity = 0;  // XXH3-64 of the canonical identity (GPCK); not kept by the index
  uint64_t logical = 0;   // XXH3-64 of GPCL: what "incompatible" misses are told by
  uint64_t parent = 0;    // XXH3-64 of chain[0]: blocks that may be prefixes of each other
  uint64_t tail = 0;      // XXH3-64 of chain.back(): the block a child's chain[0] names
  uint64_t prefix = 0;    // ChainDigest(id, chain.size()): the strict-prefix test
  uint32_t valid_length = 0;
  uint32_t block_capacity = 0;
  uint8_t chain_length = 0;  // <= kMaxChainLength
  bool operator==(const IndexKeys&) const = default;
};

// REQUIRES: Validate(id) == kOk and `canonical` == EncodePhysicalKey(id).
IndexKeys IndexKeysOf(const CacheIdentity& id, std::span<const uint8_t> canonical);
// Digest of chain[0..n) and the multimodal fields: equal for a block whose chain is the
// first n entries of `id`'s and whose multimodal inputs are the same.
uint64_t ChainDigest(const CacheIdentity& id, size_t n);
// What IndexKeys::parent and tail are of a chain's first and last hash.
uint64_t ChainHash(std::span<const uint8_t> chain_entry);
uint64_t IdentityDigest(std::span<const uint8_t> canonical);

// A block name (kDigestHexLength lowercase hex digits) in binary; binary order is name order.
using BlockDigest = std::array<uint8_t, 16>;
std::optional<BlockDigest> ParseBlockName(std::string_view name);
std::string FormatBlockName(const BlockDigest& name);
// The same into `out`, reusing its buffer.
void FormatBlockNameInto(const BlockDigest& name, std::string& out);

}  // namespace gpucache
