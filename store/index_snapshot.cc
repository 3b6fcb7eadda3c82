#include "store/index_snapshot.h"

#include <xxhash.h>

#include <cstring>

namespace gpucache {
namespace {

void Put(Bytes& out, uint64_t v, int n) {
  for (int i = 0; i < n; i++) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Bounds-checked reader: a read past the end fails the whole decode.
class In {
 public:
  explicit In(std::span<const uint8_t> b) : b_(b) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == b_.size(); }
  uint64_t Get(int n) {
    if (!Need(n)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= uint64_t{b_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  std::span<const uint8_t> Take(uint64_t n) {
    if (!Need(n)) return {};
    auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  bool Need(uint64_t n) {
    if (!ok_ || n > b_.size() - pos_) ok_ = false;
    return ok_;
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace

Bytes EncodeSnapshot(const std::vector<SnapshotEntry>& entries) {
  Bytes out = {'G', 'P', 'C', 'X'};
  Put(out, 1, 4);
  Put(out, entries.size(), 8);
  for (const SnapshotEntry& e : entries) {
    Put(out, e.path.size(), 2);
    out.insert(out.end(), e.path.begin(), e.path.end());
    Put(out, e.identity.size(), 4);
    out.insert(out.end(), e.identity.begin(), e.identity.end());
    for (uint64_t v : {e.size, e.commit_epoch, e.region_id}) Put(out, v, 8);
    Put(out, e.uid, 4);
    Put(out, e.gid, 4);
    Put(out, e.commit_time_ns, 8);
    auto digest = HexDecode(e.digest_hex);
    Bytes d = digest && digest->size() == 16 ? *digest : Bytes(16, 0);
    out.insert(out.end(), d.begin(), d.end());
    Put(out, e.inode, 8);
    Put(out, e.file_size, 8);
    Put(out, static_cast<uint64_t>(e.ctime_sec), 8);
    Put(out, static_cast<uint64_t>(e.ctime_nsec), 8);
  }
  Put(out, XXH3_64bits(out.data(), out.size()), 8);
  return out;
}

std::optional<std::vector<SnapshotEntry>> DecodeSnapshot(std::span<const uint8_t> bytes) {
  if (bytes.size() < 24) return std::nullopt;
  std::span<const uint8_t> body = bytes.first(bytes.size() - 8);
  In tail(bytes.last(8));
  if (tail.Get(8) != XXH3_64bits(body.data(), body.size())) return std::nullopt;
  In in(body);
  auto magic = in.Take(4);
  if (!in.ok() || std::memcmp(magic.data(), "GPCX", 4) != 0 || in.Get(4) != 1) return std::nullopt;
  uint64_t count = in.Get(8);
  if (!in.ok() || count > body.size()) return std::nullopt;
  std::vector<SnapshotEntry> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count && in.ok(); i++) {
    SnapshotEntry e;
    auto path = in.Take(in.Get(2));
    e.path.assign(path.begin(), path.end());
    auto id = in.Take(in.Get(4));
    e.identity.assign(id.begin(), id.end());
    e.size = in.Get(8);
    e.commit_epoch = in.Get(8);
    e.region_id = in.Get(8);
    e.uid = static_cast<uint32_t>(in.Get(4));
    e.gid = static_cast<uint32_t>(in.Get(4));
    e.commit_time_ns = in.Get(8);
    e.digest_hex = HexEncode(in.Take(16));
    e.inode = in.Get(8);
    e.file_size = in.Get(8);
    e.ctime_sec = static_cast<int64_t>(in.Get(8));
    e.ctime_nsec = static_cast<int64_t>(in.Get(8));
    out.push_back(std::move(e));
  }
  if (!in.ok() || !in.done()) return std::nullopt;
  return out;
}

}  // namespace gpucache
