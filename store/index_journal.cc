#include "store/index_journal.h"

#include <xxhash.h>

#include <map>
#include <tuple>

#include "store/codec.h"

namespace gpucache {
namespace {

constexpr uint8_t kCommit = 1;
constexpr uint8_t kRemoval = 2;

}  // namespace

Bytes EncodeJournalRecord(const JournalRecord& record) {
  ByteWriter w;
  w.U32(0);  // the length, filled in below
  w.U8(record.removal ? kRemoval : kCommit);
  w.Str(record.ns);
  if (record.removal) {
    w.Raw(record.entry.block);
  } else {
    WriteSnapshotEntry(w, record.entry);
  }
  Bytes& out = w.bytes();
  uint64_t sum = XXH3_64bits(out.data() + 4, out.size() - 4);
  w.U64(sum);
  uint32_t length = static_cast<uint32_t>(out.size() - 4);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(length >> (8 * i));
  return w.Take();
}

std::vector<JournalRecord> DecodeJournal(std::span<const uint8_t> bytes) {
  std::vector<JournalRecord> out;
  size_t at = 0;
  while (bytes.size() - at >= 4 + 1 + 2 + 16 + 8) {
    uint32_t length = ByteReader(bytes.subspan(at, 4)).U32();
    if (length < 1 + 2 + 16 + 8 || length > bytes.size() - at - 4) break;  // cut short
    std::span<const uint8_t> body = bytes.subspan(at + 4, length - 8);
    uint64_t sum = ByteReader(bytes.subspan(at + 4 + length - 8, 8)).U64();
    if (sum != XXH3_64bits(body.data(), body.size())) break;
    ByteReader in(body);
    JournalRecord r;
    uint8_t kind = in.U8();
    r.removal = kind == kRemoval;
    r.ns = in.Str();
    if (r.removal) {
      auto name = in.Raw(16);
      if (name.size() == 16) std::copy(name.begin(), name.end(), r.entry.block.begin());
    } else {
      ReadSnapshotEntry(in, r.entry);
    }
    if (!in.ok() || !in.AtEnd() || (kind != kCommit && kind != kRemoval)) break;
    out.push_back(std::move(r));
    at += 4 + length;
  }
  return out;
}

void ApplyJournal(IndexSnapshot& snapshot, const std::vector<JournalRecord>& records) {
  if (records.empty()) return;
  std::map<std::string, uint32_t> ns_index;
  for (uint32_t i = 0; i < snapshot.namespaces.size(); ++i) ns_index.emplace(snapshot.namespaces[i], i);
  std::map<std::pair<uint32_t, BlockDigest>, size_t> where;  // entry index, or SIZE_MAX if removed
  for (size_t i = 0; i < snapshot.entries.size(); ++i) {
    where[{snapshot.entries[i].ns, snapshot.entries[i].block}] = i;
  }
  constexpr size_t kGone = SIZE_MAX;
  for (const JournalRecord& r : records) {
    auto [ns, added] = ns_index.try_emplace(r.ns, static_cast<uint32_t>(snapshot.namespaces.size()));
    if (added) snapshot.namespaces.push_back(r.ns);
    auto [it, fresh] = where.try_emplace({ns->second, r.entry.block}, kGone);
    if (r.removal) {
      it->second = kGone;
      continue;
    }
    SnapshotEntry e = r.entry;
    e.ns = ns->second;
    if (it->second == kGone) {
      it->second = snapshot.entries.size();
      snapshot.entries.push_back(e);
    } else {
      snapshot.entries[it->second] = e;
    }
  }
  // Keep the entries still in place, in their order.
  std::vector<bool> keep(snapshot.entries.size(), false);
  for (const auto& [key, i] : where) {
    if (i != kGone) keep[i] = true;
  }
  size_t kept = 0;
  for (size_t i = 0; i < snapshot.entries.size(); ++i) {
    if (keep[i]) snapshot.entries[kept++] = snapshot.entries[i];
  }
  snapshot.entries.resize(kept);
}

}  // namespace gpucache
