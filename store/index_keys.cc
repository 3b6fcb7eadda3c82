#include "store/index_keys.h"

#include <xxhash.h>

#include "store/codec.h"
#include "store/layout.h"

namespace gpucache {
namespace {

uint64_t Hash(std::span<const uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

uint64_t IdentityDigest(std::span<const uint8_t> canonical) { return Hash(canonical); }

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
  k.parent = Hash(id.chain.front());
  k.tail = Hash(id.chain.back());
  k.prefix = ChainDigest(id, id.chain.size());
  k.valid_length = id.valid_length;
  k.block_capacity = id.block_capacity;
  k.chain_length = static_cast<uint8_t>(id.chain.size());
  return k;
}

std::optional<BlockDigest> ParseBlockName(std::string_view name) {
  if (name.size() != kDigestHexLength) return std::nullopt;
  BlockDigest out;
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = HexValue(name[2 * i]), lo = HexValue(name[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
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
