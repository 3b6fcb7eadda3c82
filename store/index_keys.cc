#include "store/index_keys.h"

#include "store/fast_hash.h"

#include <array>
#include <cstdint>

#include "store/codec.h"
#include "store/layout.h"

namespace gpucache {
namespace {

uint64_t Hash(std::span<const uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

// A byte's value as a lowercase hex digit, -1 for any other byte. A table, so that a parse
// takes no branch per character: names are random, so such branches mispredicted about half
// the time (~140 ns a name; a restart parses a million).
constexpr std::array<int8_t, 256> kHexValue = [] {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  for (int c = '0'; c <= '9'; ++c) t[c] = static_cast<int8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c) t[c] = static_cast<int8_t>(c - 'a' + 10);
  return t;
}();

}  // namespace

uint64_t IdentityDigest(std::span<const uint8_t> canonical) { return Hash(canonical); }

uint64_t ChainHash(std::span<const uint8_t> chain_entry) { return Hash(chain_entry); }

uint64_t ChainDigest(const CacheIdentity& id, size_t n) {
  ByteWriter w;
  w.U16(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n && i < id.chain.size(); ++i) w.Blob16(id.chain[i]);
  if (id.multimodal) {
    w.U8(1);
    w.Str(id.multimodal->processor);
    w.Blob16(id.multimodal->input_digest);
  } else {
    w.U8(0);
  }
  return Hash(w.bytes());
}

IndexKeys IndexKeysOf(const CacheIdentity& id, std::span<const uint8_t> canonical) {
  IndexKeys k;
  k.identity = IdentityDigest(canonical);
  k.logical = Hash(EncodeLogicalKey(id));
  k.parent = ChainHash(id.chain.front());
  k.tail = ChainHash(id.chain.back());
  k.prefix = ChainDigest(id, id.chain.size());
  k.valid_length = id.valid_length;
  k.block_capacity = id.block_capacity;
  k.chain_length = static_cast<uint8_t>(id.chain.size());
  return k;
}

std::optional<BlockDigest> ParseBlockName(std::string_view name) {
  if (name.size() != kDigestHexLength) return std::nullopt;
  BlockDigest out;
  int invalid = 0;  // negative once any byte was not a digit
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = kHexValue[static_cast<uint8_t>(name[2 * i])];
    int lo = kHexValue[static_cast<uint8_t>(name[2 * i + 1])];
    invalid |= hi | lo;
    out[i] = static_cast<uint8_t>((hi & 15) << 4 | (lo & 15));
  }
  if (invalid < 0) return std::nullopt;
  return out;
}

void FormatBlockNameInto(const BlockDigest& name, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.resize(kDigestHexLength);
  for (size_t i = 0; i < name.size(); ++i) {
    out[2 * i] = kHex[name[i] >> 4];
    out[2 * i + 1] = kHex[name[i] & 15];
  }
}

std::string FormatBlockName(const BlockDigest& name) {
  std::string out;
  FormatBlockNameInto(name, out);
  return out;
}

}  // namespace gpucache
