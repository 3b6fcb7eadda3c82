#include "store/block_file.h"

#include <doctest/doctest.h>

#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

BlockHeader SampleHeader(size_t payload_size) {
  BlockHeader h;
  Bytes payload = test::Payload(payload_size);
  h.payload_length = payload.size();
  h.commit_epoch = 7;
  h.region_id = (7ull << 32) | 3;
  h.owner_uid = 1000;
  h.owner_gid = 1001;
  h.commit_time_ns = 1234567890;
  h.identity = EncodePhysicalKey(test::SampleIdentity());
  h.checksums = ComputeChecksums(payload);
  return h;
}

TEST_CASE("BlockFile: header round-trips") {
  for (size_t size : {1u, 65536u, 65537u, 1u << 20}) {
    BlockHeader h = SampleHeader(size);
    Bytes enc = EncodeBlockHeader(h);
    CHECK(HeaderLengthFromPrefix(enc) == enc.size());
    auto back = DecodeBlockHeader(enc, kBlockDataOffset + size);
    REQUIRE(back.ok());
    CHECK(back.value() == h);
  }
}

TEST_CASE("BlockFile: every single-bit flip of the header is refused") {
  BlockHeader h = SampleHeader(100000);
  const Bytes enc = EncodeBlockHeader(h);
  for (size_t byte = 0; byte < enc.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes bad = enc;
      bad[byte] ^= static_cast<uint8_t>(1 << bit);
      CAPTURE(byte);
      CHECK_FALSE(DecodeBlockHeader(bad, kBlockDataOffset + 100000).ok());
    }
  }
}

TEST_CASE("BlockFile: a truncated or extended file is refused") {
  BlockHeader h = SampleHeader(5000);
  Bytes enc = EncodeBlockHeader(h);
  CHECK(DecodeBlockHeader(enc, kBlockDataOffset + 5000).ok());
  CHECK_FALSE(DecodeBlockHeader(enc, kBlockDataOffset + 4999).ok());
  CHECK_FALSE(DecodeBlockHeader(enc, kBlockDataOffset + 5001).ok());
  for (size_t n = 0; n < enc.size(); ++n) {
    CHECK_FALSE(DecodeBlockHeader(std::span(enc.data(), n), 0).ok());
  }
}

TEST_CASE("BlockFile: the largest header fits before the data offset") {
  BlockHeader h = SampleHeader(1);
  h.identity.assign(kMaxIdentityBytes, 0);
  h.checksums.chunks.assign(kMaxChunkCount, 0);
  CHECK(EncodeBlockHeader(h).size() <= kBlockDataOffset);
}

TEST_CASE("Checksum: chunk sums depend on the chunk index") {
  Bytes chunk = test::Payload(1000);
  CHECK(ChunkChecksum(chunk, 0) != ChunkChecksum(chunk, 1));
}

TEST_CASE("Checksum: streaming equals one shot, whatever the piece sizes") {
  Bytes payload = test::Payload(300000);
  PayloadChecksums one = ComputeChecksums(payload);
  PayloadHasher h(ChunkSizeFor(payload.size()));
  for (size_t at = 0; at < payload.size(); at += 7777) {
    h.Update(std::span(payload).subspan(at, std::min<size_t>(7777, payload.size() - at)));
  }
  PayloadChecksums streamed = h.Finish();
  CHECK(streamed.chunks == one.chunks);
  CHECK(streamed.digest_hex == one.digest_hex);
  CHECK(one.chunks.size() == 5);  // 4 full 64 KiB chunks and a tail
}

TEST_CASE("Checksum: chunk size grows so the count stays bounded") {
  CHECK(ChunkSizeFor(1) == kDefaultChunkSize);
  CHECK(ChunkSizeFor(256ull << 20) == kDefaultChunkSize);
  CHECK(ChunkSizeFor((256ull << 20) + 1) == 2 * kDefaultChunkSize);
  CHECK((4ull << 30) / ChunkSizeFor(4ull << 30) <= kMaxChunkCount);
}

}  // namespace
}  // namespace gpucache
