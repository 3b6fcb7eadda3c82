#include "store/index_snapshot.h"

#include "store/codec.h"
#include "store/posix_io.h"

#include <algorithm>

#include "store/fast_hash.h"


namespace gpucache {
namespace {
// Version 3 has version 2's layout; see index_snapshot.h for why it is another number.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kOldestReadable = 2;
// WriteSnapshotEntry's fields, all fixed-width; and one entry as written, its namespace index
// first.
constexpr size_t kEntryFieldBytes = 16 + 3 * 8 + 2 * 4 + 8 + 16 + 5 * 8 + 2 * 4 + 1 + 4 * 8;
constexpr size_t kEntryBytes = 4 + kEntryFieldBytes;
// The least a namespace takes: its u16 length (an empty name).
constexpr size_t kLeastNamespaceBytes = 2;

// Whether `count` items of at least `each` bytes fit in what `in` has left. Checked before
// anything is reserved for the count: one bounded only by the body's length had the decoder
// reserve an entry's memory (sizeof(SnapshotEntry)) per byte of INDEX, dozens of times the
// machine's memory for the largest INDEX read (index_log.cc), and bad_alloc at every start.
bool Fits(const ByteReader& in, size_t body_bytes, uint64_t count, size_t each) {
  return in.ok() && count <= (body_bytes - in.pos()) / each;
}
}  // namespace

void WriteSnapshotEntry(ByteWriter& w, const SnapshotEntry& e) {
  w.Raw(e.block);
  for (uint64_t v : {e.size, e.commit_epoch, e.region_id}) w.U64(v);
  w.U32(e.uid);
  w.U32(e.gid);
  w.U64(e.commit_time_ns);
  w.Raw(e.digest);
  const IndexKeys& k = e.keys;
  for (uint64_t v : {k.identity, k.logical, k.parent, k.tail, k.prefix}) w.U64(v);
  w.U32(k.valid_length);
  w.U32(k.block_capacity);
  w.U8(k.chain_length);
  w.U64(e.inode);
  w.U64(e.file_size);
  w.U64(static_cast<uint64_t>(e.ctime_sec));
  w.U64(static_cast<uint64_t>(e.ctime_nsec));
}

void ReadSnapshotEntry(ByteReader& in, SnapshotEntry& e) {
  // One bounds check for the whole entry (a short input leaves `in` failed), then plain loads:
  // the byte-by-byte reads were a third of a journal replay.
  std::span<const uint8_t> fields = in.Raw(kEntryFieldBytes);
  if (fields.size() != kEntryFieldBytes) return;
  FixedReader f(fields);
  f.Copy(e.block);
  e.size = f.U64();
  e.commit_epoch = f.U64();
  e.region_id = f.U64();
  e.uid = f.U32();
  e.gid = f.U32();
  e.commit_time_ns = f.U64();
  f.Copy(e.digest);
  IndexKeys& k = e.keys;
  k.identity = f.U64();
  k.logical = f.U64();
  k.parent = f.U64();
  k.tail = f.U64();
  k.prefix = f.U64();
  k.valid_length = f.U32();
  k.block_capacity = f.U32();
  k.chain_length = f.U8();
  e.inode = f.U64();
  e.file_size = f.U64();
  e.ctime_sec = static_cast<int64_t>(f.U64());
  e.ctime_nsec = static_cast<int64_t>(f.U64());
}

Bytes EncodeSnapshot(const IndexSnapshot& snapshot) {
  ByteWriter w;
  // One allocation, not a doubling per few thousand entries.
  w.bytes().reserve(64 + 32 * snapshot.namespaces.size() + kEntryBytes * snapshot.entries.size());
  w.Raw(std::string_view("GPCX"));
  w.U32(kVersion);
  w.U32(static_cast<uint32_t>(snapshot.namespaces.size()));
  for (const std::string& ns : snapshot.namespaces) w.Str(ns);
  w.U64(snapshot.entries.size());
  for (const SnapshotEntry& e : snapshot.entries) {
    w.U32(e.ns);
    WriteSnapshotEntry(w, e);
  }
  Bytes& out = w.bytes();
  uint64_t sum = XXH3_64bits(out.data(), out.size());
  w.U64(sum);
  return w.Take();
}


std::optional<IndexSnapshot> DecodeSnapshot(std::span<const uint8_t> bytes) {
  if (bytes.size() < 28) return std::nullopt;
  std::span<const uint8_t> body = bytes.first(bytes.size() - 8);
  if (ByteReader(bytes.last(8)).U64() != XXH3_64bits(body.data(), body.size())) return std::nullopt;
  ByteReader in(body);
  in.Expect("GPCX");
  if (uint32_t version = in.U32(); version < kOldestReadable || version > kVersion) return std::nullopt;
  IndexSnapshot out;
  uint32_t namespaces = in.U32();
  if (!Fits(in, body.size(), namespaces, kLeastNamespaceBytes)) return std::nullopt;
  out.namespaces.reserve(namespaces);
  for (uint32_t i = 0; i < namespaces && in.ok(); i++) out.namespaces.push_back(in.Str());
  uint64_t count = in.U64();
  if (!Fits(in, body.size(), count, kEntryBytes)) return std::nullopt;
  out.entries.reserve(count);
  AdviseHugePages(out.entries);
  for (uint64_t i = 0; i < count && in.ok(); i++) {
    SnapshotEntry& e = out.entries.emplace_back();
    e.ns = in.U32();
    if (e.ns >= out.namespaces.size()) return std::nullopt;
    ReadSnapshotEntry(in, e);
  }
  if (!in.ok() || !in.AtEnd()) return std::nullopt;
  return out;
}

}  // namespace gpucache
