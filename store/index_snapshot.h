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
// The snapshot carries what the index keeps (IndexKeys, store/index_keys.h), not the identity:
// loading it decodes nothing. Whether the entry's keys belong to the file's identity is not
// checked at start; every open and Stat checks that the header's identity names the block's
// address. keys.identity is written as zero from the index (which no longer keeps it) and
// never read back.
//
// Format (little-endian): "GPCX", u32 version 3, u32 namespace count, per namespace u16 length
// + "tenant/ns"; u64 entry count, then per entry: u32 namespace index, the block name as 16
// binary bytes, u64 payload size, u64 commit epoch, u64 region id, u32 uid, u32 gid,
// u64 commit time (ns), 16 bytes XXH3-128 of the payload (zeros where the writer did not know
// it: the index keeps no payload checksum; never read back), the keys (u64 identity, logical,
// parent, tail and prefix digests, u32 valid length, u32 block capacity, u8 chain length),
// u64 inode, u64 file size, i64 ctime seconds, i64 ctime nanoseconds; then the XXH3-64 of
// everything before it. Version 1 (which carried the GPCK identity) is refused: one scan.
// Version 2 has the same layout and is read as 3. Version 3 says that keys.identity and the
// payload digest may be zeros (the index keeps neither since then; no reader uses them): a
// daemon of before it compared keys.identity with each block's header at open, and so
// refuses a version-3 snapshot (one scan) rather than taking every block for damaged.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "store/identity.h"
#include "store/index_keys.h"

namespace gpucache {

struct SnapshotEntry {
  uint32_t ns = 0;        // index into IndexSnapshot::namespaces
  BlockDigest block{};    // the block file's name, in binary
  uint64_t size = 0;
  uint64_t commit_epoch = 0;
  uint64_t region_id = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t commit_time_ns = 0;
  BlockDigest digest{};  // XXH3-128 of the payload
  IndexKeys keys;
  uint64_t inode = 0;
  uint64_t file_size = 0;
  int64_t ctime_sec = 0;
  int64_t ctime_nsec = 0;
  bool operator==(const SnapshotEntry&) const = default;
};

struct IndexSnapshot {
  std::vector<std::string> namespaces;  // "tenant/namespace"
  std::vector<SnapshotEntry> entries;
  bool operator==(const IndexSnapshot&) const = default;
};

inline constexpr char kSnapshotFile[] = "INDEX";

Bytes EncodeSnapshot(const IndexSnapshot& snapshot);
// One entry's fields after its namespace index, as the snapshot and the journal write them.
class ByteWriter;
class ByteReader;
void WriteSnapshotEntry(ByteWriter& w, const SnapshotEntry& e);
void ReadSnapshotEntry(ByteReader& in, SnapshotEntry& e);
// nullopt for anything that is not an intact version-2 or version-3 snapshot (a namespace
// index out of range included, and a count of namespaces or entries more than the bytes after
// it could hold, however its checksum reads): never an exception.
std::optional<IndexSnapshot> DecodeSnapshot(std::span<const uint8_t> bytes);

}  // namespace gpucache
