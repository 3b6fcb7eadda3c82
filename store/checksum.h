// Payload checksums: one XXH3-64 per fixed-size chunk (seeded with the chunk's index, so two
// chunks swapped on disk do not verify) and one XXH3-128 over the whole payload.
//
// Per-chunk sums let any read range be verified before it reaches the kernel without reading
// the whole block; the whole-payload sum names the content (xattr, cold-tier manifests).
#pragma once

#include "store/fast_hash.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "store/mutex.h"

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

// The checksums of a payload computed as its bytes are written, so that a commit need not
// read them back: a writer that streams a block from its start to its end is hashed as it
// goes. Keeps a hasher fed with the payload's prefix [0, hashed()) exactly as it landed:
//   - a write that starts at hashed() and landed whole is fed;
//   - a write that starts past it (out of order) is not: the seal reads the rest back;
//   - a write or a truncate that reaches below it (an overwrite, O_TRUNC) starts over at 0;
//   - writes and resizes that overlap in time are never fed (the order they landed in is
//     unknown), and a failed write below hashed() starts over too.
// Every write or resize of the payload is bracketed: Begin() before it, End*() after it.
// Thread-safe.
class ArrivalHasher {
 public:
  ArrivalHasher();
  ~ArrivalHasher();
  ArrivalHasher(const ArrivalHasher&) = delete;
  ArrivalHasher& operator=(const ArrivalHasher&) = delete;

  // Before a write or resize; returns a ticket for its End*.
  uint64_t Begin();
  // After a write at payload offset `offset` of `data`; `landed` if all of it was written.
  void EndWrite(uint64_t ticket, uint64_t offset, std::span<const uint8_t> data, bool landed);
  // After the payload was resized to `size` (whether or not the resize succeeded).
  void EndResize(uint64_t ticket, uint64_t size);
  // For the seal: a hasher for chunks of `chunk_size` already fed with the first `*hashed`
  // payload bytes (0 if the prefix is of another chunk size or there is none). Starts this
  // one over.
  std::unique_ptr<PayloadHasher> Take(uint32_t chunk_size, uint64_t* hashed);
  uint64_t hashed() const;

 private:
  void RestartLocked() REQUIRES(mu_);
  // Whether the operation holding `ticket` overlapped none other; ends it.
  bool FinishLocked(uint64_t ticket) REQUIRES(mu_);
  mutable Mutex mu_;
  std::unique_ptr<PayloadHasher> hasher_ GUARDED_BY(mu_);  // chunks of kDefaultChunkSize
  uint64_t hashed_ GUARDED_BY(mu_) = 0;
  uint64_t started_ GUARDED_BY(mu_) = 0;     // tickets handed out
  uint32_t active_ GUARDED_BY(mu_) = 0;      // operations begun and not ended
  uint64_t overlapped_ GUARDED_BY(mu_) = 0;  // tickets at or below this overlapped another operation
};

}  // namespace gpucache
