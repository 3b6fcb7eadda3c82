#include "store/block_file.h"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include "store/env.h"
#include "store/posix_io.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

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

// Regression (review, 2026-12-06): the chunk count and the file-size check were computed in
// 64 bits that wrap, so a sealed header with payload_length 2^64 - 4096 and no chunks passed:
// the block was indexed at a start with a size of ~16 EiB (quota counters wrapped), and its first
// read sized a buffer by the chunk size (4 GiB) or read past the chunk sums.
TEST_CASE("BlockFile: lengths that wrap 64 bits, or a chunk size not the format's, are refused") {
  BlockHeader h = SampleHeader(1);
  h.payload_length = ~uint64_t{0} - 4095;  // 2^64 - 4096
  for (uint32_t cs : {65536u, 0xFFFFFFFFu}) {
    CAPTURE(cs);
    h.checksums.chunk_size = cs;
    h.checksums.chunks.clear();  // (len + cs - 1) / cs wraps to 0
    Bytes enc = EncodeBlockHeader(h);
    CHECK_FALSE(DecodeBlockHeader(enc, kBlockDataOffset - 4096).ok());  // offset + len wraps
    CHECK_FALSE(DecodeBlockHeader(enc, 0).ok());
  }
  // A well-formed 1 MiB block whose one chunk is the whole payload: every 4 KiB read would
  // read and hash all of it. The format's chunk size for 1 MiB is 64 KiB.
  BlockHeader big = SampleHeader(1 << 20);
  Bytes payload = test::Payload(1 << 20);
  big.checksums.chunk_size = 1u << 20;
  big.checksums.chunks = {ChunkChecksum(payload, 0)};
  CHECK_FALSE(DecodeBlockHeader(EncodeBlockHeader(big), kBlockDataOffset + (1 << 20)).ok());
}

TEST_CASE("BlockFile: the largest header fits before the data offset") {
  BlockHeader h = SampleHeader(1);
  h.identity.assign(kMaxIdentityBytes, 0);
  h.checksums.chunks.assign(kMaxChunkCount, 0);
  CHECK(EncodeBlockHeader(h).size() <= kBlockDataOffset);
}

// Writes a valid block file of `payload_size` bytes at `path`.
void WriteBlockFile(const std::string& path, size_t payload_size) {
  Bytes file = EncodeBlockHeader(SampleHeader(payload_size));
  file.resize(kBlockDataOffset);
  Bytes payload = test::Payload(payload_size);
  file.insert(file.end(), payload.begin(), payload.end());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()), file.size());
}

// An Env whose reads fail as a dying disk's do.
class ReadsFail final : public EnvWrapper {
 public:
  StatusCode Read(int, std::span<uint8_t>, uint64_t) override { return StatusCode::kIoError; }
};

// The store and gpucachectl read headers with one reader, through Env. The store's rule rests
// on its telling apart a damaged header (the file may be deleted) from one that could not be
// read (the file is kept); gpucachectl's reader used to call both "damaged".
TEST_CASE("BlockFile: a header that cannot be read is an I/O error, not a damaged header") {
  test::TempDir tmp;
  std::string path = tmp.path() + "/block";
  WriteBlockFile(path, 5000);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  Result<BlockHeader> good = ReadBlockHeader(fd.get());
  REQUIRE(good.ok());
  CHECK(good->payload_length == 5000);
  ReadsFail env;
  CHECK(ReadBlockHeader(env, fd.get()).status() == StatusCode::kIoError);
  // A damaged one stays kInvalidArgument, through either entry point.
  Fd rw(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  uint8_t byte = 0x5a;
  REQUIRE(::pwrite(rw.get(), &byte, 1, 20) == 1);
  CHECK(ReadBlockHeader(fd.get()).status() == StatusCode::kInvalidArgument);
  CHECK(ReadBlockHeader(Env::Posix(), fd.get()).status() == StatusCode::kInvalidArgument);
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
