#include "store/index_snapshot.h"

#include "store/codec.h"

#include <xxhash.h>


namespace gpucache {
Bytes EncodeSnapshot(const std::vector<SnapshotEntry>& entries) {
  ByteWriter w;
  w.Raw(std::string_view("GPCX"));
  w.U32(1);
  w.U64(entries.size());
  for (const SnapshotEntry& e : entries) {
    w.Str(e.path);
    w.U32(static_cast<uint32_t>(e.identity.size()));
    w.Raw(e.identity);
    for (uint64_t v : {e.size, e.commit_epoch, e.region_id}) w.U64(v);
    w.U32(e.uid);
    w.U32(e.gid);
    w.U64(e.commit_time_ns);
    auto digest = HexDecode(e.digest_hex);
    w.Raw(digest && digest->size() == 16 ? *digest : Bytes(16, 0));
    w.U64(e.inode);
    w.U64(e.file_size);
    w.U64(static_cast<uint64_t>(e.ctime_sec));
    w.U64(static_cast<uint64_t>(e.ctime_nsec));
  }
  Bytes& out = w.bytes();
  uint64_t sum = XXH3_64bits(out.data(), out.size());
  w.U64(sum);
  return w.Take();
}

std::optional<std::vector<SnapshotEntry>> DecodeSnapshot(std::span<const uint8_t> bytes) {
  if (bytes.size() < 24) return std::nullopt;
  std::span<const uint8_t> body = bytes.first(bytes.size() - 8);
  if (ByteReader(bytes.last(8)).U64() != XXH3_64bits(body.data(), body.size())) return std::nullopt;
  ByteReader in(body);
  in.Expect("GPCX");
  if (in.U32() != 1) return std::nullopt;
  uint64_t count = in.U64();
  if (!in.ok() || count > body.size()) return std::nullopt;
  std::vector<SnapshotEntry> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count && in.ok(); i++) {
    SnapshotEntry e;
    e.path = in.Str();
    auto id = in.Raw(in.U32());
    e.identity.assign(id.begin(), id.end());
    e.size = in.U64();
    e.commit_epoch = in.U64();
    e.region_id = in.U64();
    e.uid = in.U32();
    e.gid = in.U32();
    e.commit_time_ns = in.U64();
    e.digest_hex = HexEncode(in.Raw(16));
    e.inode = in.U64();
    e.file_size = in.U64();
    e.ctime_sec = static_cast<int64_t>(in.U64());
    e.ctime_nsec = static_cast<int64_t>(in.U64());
    out.push_back(std::move(e));
  }
  if (!in.ok() || !in.AtEnd()) return std::nullopt;
  return out;
}

}  // namespace gpucache
