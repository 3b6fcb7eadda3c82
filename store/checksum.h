// Payload checksums: one XXH3-64 per fixed-size chunk (seeded with the chunk's index, so two
// chunks swapped on disk do not verify) and one XXH3-128 over the whole payload.
//
// Per-chunk sums let any read range be verified before it reaches the kernel without reading
// the whole block; the whole-payload sum names the content (xattr, cold-tier manifests).
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gpucache {

inline constexpr uint32_t kDefaultChunkSize = 64 * 1024;
inline constexpr uint32_t kMaxChunkCount = 4096;

// 64 KiB, doubled until the payload needs at most kMaxChunkCount chunks: keeps the header
// bounded (see block_file.h) for any object-size limit.
uint32_t ChunkSizeFor(uint64_t payload_size);

uint64_t ChunkChecksum(std::span<const uint8_t> chunk, uint64_t chunk_index);

struct PayloadChecksums {
  uint32_t chunk_size = kDefaultChunkSize;
  std::vector<uint64_t> chunks;
  std::string digest_hex;  // XXH3-128 of the whole payload, canonical lowercase hex
  bool operator==(const PayloadChecksums&) const = default;
};

// Feeds a payload in order, in pieces of any size. Not thread-safe.
class PayloadHasher {
 public:
  explicit PayloadHasher(uint32_t chunk_size);
  ~PayloadHasher();
  PayloadHasher(const PayloadHasher&) = delete;
  PayloadHasher& operator=(const PayloadHasher&) = delete;

  void Update(std::span<const uint8_t> data);
  PayloadChecksums Finish();

 private:
  void CloseChunk();
  uint32_t chunk_size_;
  XXH3_state_t* whole_;
  XXH3_state_t* chunk_;
  uint64_t in_chunk_ = 0;
  PayloadChecksums out_;
};

PayloadChecksums ComputeChecksums(std::span<const uint8_t> payload);

}  // namespace gpucache
