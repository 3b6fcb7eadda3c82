// The index snapshot: what a clean shutdown knew about every committed block of one data
// directory, so that the next start need not open and read every block header.
//
// Trust: the snapshot only saves work, never checks. It is deleted as soon as it is read; an
// entry is used only when the file at its path is still the very file it describes: the same
// inode, size and change time (ctime, which no write, rename-over or chmod can leave alone and
// no caller can set). A file written, replaced or copied over while the daemon was down fails
// that test and is read and checked in full, as without a snapshot. And nothing is served on
// the snapshot's word: every open re-reads the header, every read verifies checksums.
//
// Format (little-endian): "GPCX", u32 version 1, u64 count, then per entry: u16 length + the
// path "tenant/ns/block", u32 length + the GPCK identity, u64 payload size, u64 commit epoch,
// u64 region id, u32 uid, u32 gid, u64 commit time (ns), 16 bytes XXH3-128 of the payload,
// u64 inode, u64 file size, i64 ctime seconds, i64 ctime nanoseconds; then the XXH3-64 of
// everything before it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "store/identity.h"

namespace gpucache {

struct SnapshotEntry {
  std::string path;  // tenant/namespace/block
  Bytes identity;    // GPCK
  uint64_t size = 0;
  uint64_t commit_epoch = 0;
  uint64_t region_id = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t commit_time_ns = 0;
  std::string digest_hex;  // 32 lowercase hex digits
  uint64_t inode = 0;
  uint64_t file_size = 0;
  int64_t ctime_sec = 0;
  int64_t ctime_nsec = 0;
  bool operator==(const SnapshotEntry&) const = default;
};

inline constexpr char kSnapshotFile[] = "INDEX";

Bytes EncodeSnapshot(const std::vector<SnapshotEntry>& entries);
// nullopt for anything that is not an intact version-1 snapshot.
std::optional<std::vector<SnapshotEntry>> DecodeSnapshot(std::span<const uint8_t> bytes);

}  // namespace gpucache
