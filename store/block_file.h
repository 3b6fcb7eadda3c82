// The block file format (docs/block-format.md): a self-describing header at offset 0, the
// payload at data_offset (a multiple of 4096, so the payload can be read with O_DIRECT).
//
//   "GPCF" u16 version=1 u16 flags=0 u32 header_length u32 data_offset
//   u64 payload_length u32 chunk_size u32 chunk_count u64 commit_epoch u64 region_id
//   u32 owner_uid u32 owner_gid u64 commit_time_ns
//   u32 identity_length, identity (GPCK bytes)
//   chunk_count x u64 chunk checksums, 16 bytes XXH3-128 of the payload (canonical order)
//   u64 XXH3-64 of every header byte before it
//   zero padding up to data_offset, then the payload
//
// A file is valid only if the header checksum matches, every length is consistent, and the
// file is exactly data_offset + payload_length bytes long. All integers little-endian.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "store/checksum.h"
#include "store/identity.h"
#include "store/status.h"

namespace gpucache {

inline constexpr uint16_t kBlockFormatVersion = 1;
// Room for the largest header: 16 KiB identity + 4096 chunk sums + fixed fields.
inline constexpr uint32_t kBlockDataOffset = 64 * 1024;
inline constexpr size_t kMaxIdentityBytes = 16 * 1024;
inline constexpr size_t kFixedHeaderBytes = 68;  // through identity_length

struct BlockHeader {
  uint32_t data_offset = kBlockDataOffset;
  uint64_t payload_length = 0;
  uint64_t commit_epoch = 0;
  uint64_t region_id = 0;
  uint32_t owner_uid = 0;
  uint32_t owner_gid = 0;
  uint64_t commit_time_ns = 0;
  Bytes identity;                 // GPCK
  PayloadChecksums checksums;     // chunk size, per-chunk sums, whole digest

  bool operator==(const BlockHeader&) const = default;
};

// REQUIRES: identity.size() <= kMaxIdentityBytes, checksums consistent with payload_length.
Bytes EncodeBlockHeader(const BlockHeader& header);
// Parses and checks a header from the first bytes of a block file. `file_size` is checked
// against data_offset + payload_length when non-zero. Hostile input: anything inconsistent is
// kInvalidArgument. The identity is returned as bytes; callers decode and compare it.
Result<BlockHeader> DecodeBlockHeader(std::span<const uint8_t> bytes, uint64_t file_size);
// Bytes to read from the start of a file to be sure the whole header is in hand.
uint32_t HeaderLengthFromPrefix(std::span<const uint8_t> prefix);

class Env;
// Reads and checks the header of a block file through `env` (the store's seam, so that fault
// injection reaches it): kInvalidArgument if the header is damaged, the read's own status
// (kIoError...) if the file could not be read, which says nothing about its bytes.
Result<BlockHeader> ReadBlockHeader(Env& env, int fd);
// The same through the POSIX Env (gpucachectl's offline inspect, tests).
Result<BlockHeader> ReadBlockHeader(int fd);

}  // namespace gpucache
