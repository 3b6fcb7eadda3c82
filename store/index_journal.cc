#include "store/index_journal.h"

#include <xxhash.h>

#include <algorithm>
#include <tuple>

#include "store/codec.h"

namespace gpucache {
namespace {

constexpr uint8_t kCommit = 1;
constexpr uint8_t kRemoval = 2;
// A commit record with a one-letter namespace: length, kind, name, entry, sum.
constexpr uint64_t kSmallestCommit = 4 + 1 + 2 + 3 + 157 - 4 + 8;

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

namespace {

// The record at the start of `bytes`: its length in all (0 if it is cut short or fails its
// sum), its kind, namespace and the reader positioned after them, over the record's body.
struct RecordView {
  size_t length = 0;
  uint8_t kind = 0;
  std::string_view ns;
  std::span<const uint8_t> rest;
};

RecordView ViewRecord(std::span<const uint8_t> bytes) {
  RecordView v;
  if (bytes.size() < 4 + 1 + 2 + 16 + 8) return v;
  uint32_t length = ByteReader(bytes.first(4)).U32();
  if (length < 1 + 2 + 16 + 8 || length > bytes.size() - 4) return v;  // cut short
  std::span<const uint8_t> body = bytes.subspan(4, length - 8);
  if (ByteReader(bytes.subspan(4 + length - 8, 8)).U64() != XXH3_64bits(body.data(), body.size())) {
    return v;
  }
  ByteReader in(body);
  v.kind = in.U8();
  auto ns = in.Raw(in.U16());
  if (!in.ok() || (v.kind != kCommit && v.kind != kRemoval)) return v;
  v.ns = std::string_view(reinterpret_cast<const char*>(ns.data()), ns.size());
  v.rest = body.subspan(in.pos());
  v.length = 4 + length;
  return v;
}

// The record's block name (a removal) or entry (a commit); false if the body does not parse.
bool ReadBody(const RecordView& v, SnapshotEntry& e) {
  ByteReader in(v.rest);
  if (v.kind == kRemoval) {
    e.block = in.Array<16>();
  } else {
    ReadSnapshotEntry(in, e);
  }
  return in.ok() && in.AtEnd();
}

}  // namespace

std::vector<JournalRecord> DecodeJournal(std::span<const uint8_t> bytes) {
  std::vector<JournalRecord> out;
  for (size_t at = 0;;) {
    RecordView v = ViewRecord(bytes.subspan(at));
    JournalRecord r;
    if (v.length == 0 || !ReadBody(v, r.entry)) break;
    r.removal = v.kind == kRemoval;
    r.ns = std::string(v.ns);
    out.push_back(std::move(r));
    at += v.length;
  }
  return out;
}

void ApplyJournal(IndexSnapshot& snapshot, const std::vector<JournalRecord>& records) {
  JournalReplay replay(snapshot);
  for (const JournalRecord& r : records) replay.Add(EncodeJournalRecord(r));
  replay.Finish();
}

JournalReplay::JournalReplay(IndexSnapshot& snapshot)
    : snapshot_(snapshot), base_(snapshot.entries.size()) {}

uint32_t JournalReplay::NamespaceIndex(std::string_view ns) {
  if (last_index_ != UINT32_MAX && ns == last_ns_) return last_index_;
  auto& names = snapshot_.namespaces;
  auto it = std::find(names.begin(), names.end(), ns);  // a handful of namespaces
  if (it == names.end()) it = names.insert(names.end(), std::string(ns));
  last_ns_.assign(ns);
  last_index_ = static_cast<uint32_t>(it - names.begin());
  return last_index_;
}

void JournalReplay::Reserve(uint64_t bytes) {
  size_t records = static_cast<size_t>(bytes / kSmallestCommit) + 1;
  snapshot_.entries.reserve(snapshot_.entries.size() + records);
  changes_.reserve(changes_.size() + records);
}

size_t JournalReplay::Add(std::span<const uint8_t> bytes) {
  size_t at = 0;
  for (;; ++records_) {
    RecordView v = ViewRecord(bytes.subspan(at));
    if (v.length == 0) break;
    SnapshotEntry e;
    if (!ReadBody(v, e)) break;
    at += v.length;
    Change c{NamespaceIndex(v.ns), e.block, kGone};
    if (v.kind == kCommit) {
      e.ns = c.ns;
      c.entry = static_cast<uint32_t>(snapshot_.entries.size());
      snapshot_.entries.push_back(e);
    }
    changes_.push_back(c);
  }
  return at;
}

void JournalReplay::Finish() {
  // Every block's history: the snapshot's entry first, then its records in journal order; the
  // last of each decides. A stable sort by block keeps that order within a block.
  std::vector<Change> all;
  all.reserve(base_ + changes_.size());
  for (size_t i = 0; i < base_; ++i) {
    all.push_back({snapshot_.entries[i].ns, snapshot_.entries[i].block, static_cast<uint32_t>(i)});
  }
  all.insert(all.end(), changes_.begin(), changes_.end());
  std::stable_sort(all.begin(), all.end(), [](const Change& a, const Change& b) {
    return std::tie(a.ns, a.block) < std::tie(b.ns, b.block);
  });
  std::vector<SnapshotEntry> out;
  out.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    bool last = i + 1 == all.size() || all[i + 1].ns != all[i].ns || all[i + 1].block != all[i].block;
    if (last && all[i].entry != kGone) out.push_back(snapshot_.entries[all[i].entry]);
  }
  snapshot_.entries = std::move(out);
  changes_.clear();
}

}  // namespace gpucache
