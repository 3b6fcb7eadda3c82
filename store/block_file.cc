#include "store/block_file.h"

#include "store/fast_hash.h"

#include <algorithm>

#include "store/codec.h"
#include "store/env.h"

namespace gpucache {
namespace {

constexpr std::string_view kMagic = "GPCF";

}  // namespace

Bytes EncodeBlockHeader(const BlockHeader& h) {
  const auto& sums = h.checksums;
  uint32_t header_length = static_cast<uint32_t>(kFixedHeaderBytes + h.identity.size() +
                                                 sums.chunks.size() * 8 + 16 + 8);
  ByteWriter w;
  w.Raw(kMagic);
  w.U16(kBlockFormatVersion);
  w.U16(0);
  w.U32(header_length);
  w.U32(h.data_offset);
  w.U64(h.payload_length);
  w.U32(sums.chunk_size);
  w.U32(static_cast<uint32_t>(sums.chunks.size()));
  w.U64(h.commit_epoch);
  w.U64(h.region_id);
  w.U32(h.owner_uid);
  w.U32(h.owner_gid);
  w.U64(h.commit_time_ns);
  w.U32(static_cast<uint32_t>(h.identity.size()));
  w.Raw(h.identity);
  for (uint64_t c : sums.chunks) w.U64(c);
  w.Raw(*HexDecode(sums.digest_hex));
  w.U64(XXH3_64bits(w.bytes().data(), w.bytes().size()));
  return w.Take();
}

uint32_t HeaderLengthFromPrefix(std::span<const uint8_t> prefix) {
  ByteReader r(prefix);
  r.Expect(kMagic);
  r.U16();
  r.U16();
  uint32_t len = r.U32();
  return r.ok() ? len : 0;
}

namespace {

// Payloads above this would need chunks of more than 2^31 bytes (ChunkSizeFor) to stay within
// kMaxChunkCount: far past any block, and past what a 32-bit chunk size holds.
constexpr uint64_t kMaxPayloadBytes = uint64_t{kMaxChunkCount} << 31;

// The header's lengths as the format defines them (docs/block-format.md): the chunk size is the
// one ChunkSizeFor gives the payload, and the chunk count covers the payload exactly. Computed
// without wrapping: the fields are a file's, not ours.
bool LengthsAgree(uint64_t payload_length, uint32_t chunk_size, uint32_t chunk_count) {
  if (payload_length > kMaxPayloadBytes || chunk_size != ChunkSizeFor(payload_length)) return false;
  return chunk_count == payload_length / chunk_size + (payload_length % chunk_size != 0);
}

}  // namespace

Result<BlockHeader> DecodeBlockHeader(std::span<const uint8_t> bytes, uint64_t file_size) {
  constexpr auto kBad = StatusCode::kInvalidArgument;
  ByteReader r(bytes);
  r.Expect(kMagic);
  if (r.U16() != kBlockFormatVersion || r.U16() != 0) return kBad;
  uint32_t header_length = r.U32();
  if (!r.ok() || header_length < kFixedHeaderBytes + 24 || header_length > bytes.size()) {
    return kBad;
  }
  // Check the seal before trusting any field beyond the length.
  uint64_t stored_sum = ByteReader(bytes.subspan(header_length - 8, 8)).U64();
  if (XXH3_64bits(bytes.data(), header_length - 8) != stored_sum) return kBad;

  BlockHeader h;
  h.data_offset = r.U32();
  h.payload_length = r.U64();
  h.checksums.chunk_size = r.U32();
  uint32_t chunk_count = r.U32();
  h.commit_epoch = r.U64();
  h.region_id = r.U64();
  h.owner_uid = r.U32();
  h.owner_gid = r.U32();
  h.commit_time_ns = r.U64();
  uint32_t identity_length = r.U32();
  if (!r.ok() || identity_length > kMaxIdentityBytes || !LengthsAgree(h.payload_length, h.checksums.chunk_size, chunk_count) ||
      h.data_offset % 4096 != 0 || h.data_offset < header_length ||
      header_length != kFixedHeaderBytes + identity_length + uint64_t{chunk_count} * 8 + 24) {
    return kBad;
  }
  auto identity = r.Raw(identity_length);
  h.identity.assign(identity.begin(), identity.end());
  h.checksums.chunks.resize(chunk_count);
  for (auto& c : h.checksums.chunks) c = r.U64();
  h.checksums.digest_hex = HexEncode(r.Raw(16));
  if (!r.ok()) return kBad;
  if (file_size != 0 && (file_size < h.data_offset || file_size - h.data_offset != h.payload_length)) {
    return kBad;
  }
  return h;
}

Result<BlockHeader> ReadBlockHeader(Env& env, int fd) {
  Result<FileStat> st = env.StatFd(fd);
  if (!st.ok()) return st.status();
  Bytes prefix(std::min<uint64_t>(st->size, 4096));
  if (prefix.size() < 16) return StatusCode::kInvalidArgument;
  if (StatusCode s = env.Read(fd, prefix, 0); s != StatusCode::kOk) return s;
  uint32_t header_length = HeaderLengthFromPrefix(prefix);
  if (header_length == 0 || header_length > kBlockDataOffset || header_length > st->size) {
    return StatusCode::kInvalidArgument;
  }
  if (header_length > prefix.size()) {
    prefix.resize(header_length);
    if (StatusCode s = env.Read(fd, prefix, 0); s != StatusCode::kOk) return s;
  }
  return DecodeBlockHeader(prefix, st->size);
}

Result<BlockHeader> ReadBlockHeader(int fd) { return ReadBlockHeader(Env::Posix(), fd); }

}  // namespace gpucache
