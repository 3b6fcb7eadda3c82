#include "store/index_journal.h"

#include "store/fast_hash.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "store/codec.h"
#include "store/identity.h"
#include "store/layout.h"
#include "store/posix_io.h"

namespace gpucache {
namespace {

constexpr uint8_t kCommit = 1;
constexpr uint8_t kRemoval = 2;
// A commit record with a one-letter namespace: length, kind, name, entry, sum.
constexpr uint64_t kSmallestCommit = 4 + 1 + 2 + 3 + 157 - 4 + 8;
constexpr uint64_t kMostReservedBytes = uint64_t{64} << 20;

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

namespace {

// A record's namespace: "tenant/namespace", each a valid name (anything else is damage).
bool IsJournalNamespace(std::string_view ns) {
  size_t slash = ns.find('/');
  return slash != std::string_view::npos && IsValidTenantName(ns.substr(0, slash)) &&
         IsValidNamespaceName(ns.substr(slash + 1));
}

}  // namespace

std::vector<JournalRecord> DecodeJournal(std::span<const uint8_t> bytes) {
  std::vector<JournalRecord> out;
  for (size_t at = 0;;) {
    RecordView v = ViewRecord(bytes.subspan(at));
    JournalRecord r;
    if (v.length == 0 || !IsJournalNamespace(v.ns) || !ReadBody(v, r.entry)) break;
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
  EntryTable table = replay.Finish();
  std::vector<uint32_t> live;
  live.reserve(table.live());
  table.ForEachLive(snapshot.entries, [&](uint32_t i) { live.push_back(i); });
  const std::vector<SnapshotEntry>& all = snapshot.entries;
  std::sort(live.begin(), live.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(all[a].ns, all[a].block) < std::tie(all[b].ns, all[b].block);
  });
  std::vector<SnapshotEntry> out;
  out.reserve(live.size());
  for (uint32_t i : live) out.push_back(all[i]);
  snapshot.entries = std::move(out);
}

namespace {

uint64_t KeyHash(uint32_t ns, const BlockDigest& block) {
  uint64_t lo, hi;
  std::memcpy(&lo, block.data(), 8);
  std::memcpy(&hi, block.data() + 8, 8);
  // Block names are digests, but INDEX is only trusted to save work: mix anyway.
  uint64_t h = lo ^ (hi * 0xC2B2AE3D27D4EB4Full) ^ (uint64_t{ns} * 0x9E3779B97F4A7C15ull);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

}  // namespace

size_t EntryTable::SlotOf(const Entries& entries, uint64_t hash, uint32_t ns,
                          const BlockDigest& block) const {
  const size_t mask = slots_.size() - 1;
  const uint64_t tag = hash >> 32;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    uint64_t s = slots_[i];
    if (s == kEmpty) return i;
    if ((s >> 32) != tag) continue;
    const SnapshotEntry& e = entries[s & kIndex];
    if (e.ns == ns && e.block == block) return i;
  }
}

void EntryTable::Rehash(const Entries& entries, size_t slots) {
  std::vector<uint64_t> old = std::move(slots_);
  slots_.reserve(slots);
  AdviseHugePages(slots_);
  slots_.assign(slots, kEmpty);
  for (uint64_t s : old) {
    if (s == kEmpty) continue;
    const SnapshotEntry& e = entries[s & kIndex];
    uint64_t hash = KeyHash(e.ns, e.block);
    slots_[SlotOf(entries, hash, e.ns, e.block)] = s;
  }
}

void EntryTable::Reserve(const Entries& entries, size_t keys) {
  size_t slots = 16;
  while (slots < 2 * keys) slots *= 2;
  if (slots > slots_.size()) Rehash(entries, slots);
}

void EntryTable::Put(const Entries& entries, uint32_t index) {
  if (index >= kIndex || index >= entries.size()) return;  // never looked up: read in full
  if (2 * (used_ + 1) > slots_.size()) Rehash(entries, std::max<size_t>(16, 2 * slots_.size()));
  const SnapshotEntry& e = entries[index];
  uint64_t hash = KeyHash(e.ns, e.block);
  uint64_t& slot = slots_[SlotOf(entries, hash, e.ns, e.block)];
  if (slot == kEmpty) used_++;
  if (slot == kEmpty || (slot & kDropped) != 0) live_++;
  slot = (hash >> 32 << 32) | index;
}

void EntryTable::Drop(const Entries& entries, uint32_t ns, const BlockDigest& block) {
  if (slots_.empty()) return;
  uint64_t& slot = slots_[SlotOf(entries, KeyHash(ns, block), ns, block)];
  if (slot == kEmpty || (slot & kDropped) != 0) return;
  slot |= kDropped;  // kept: the entry still names the key for the probes that pass it
  live_--;
}

uint32_t EntryTable::Find(const Entries& entries, uint32_t ns, const BlockDigest& block) const {
  if (slots_.empty()) return kNone;
  uint64_t s = slots_[SlotOf(entries, KeyHash(ns, block), ns, block)];
  return s == kEmpty || (s & kDropped) != 0 ? kNone : static_cast<uint32_t>(s & kIndex);
}

JournalReplay::JournalReplay(IndexSnapshot& snapshot) : snapshot_(snapshot) {
  for (uint32_t i = 0; i < snapshot.namespaces.size(); ++i) ns_index_.emplace(snapshot.namespaces[i], i);
  const std::vector<SnapshotEntry>& entries = snapshot.entries;
  table_.Reserve(entries, entries.size());
  for (size_t i = 0; i < entries.size(); ++i) table_.Put(entries, static_cast<uint32_t>(i));
}

std::optional<uint32_t> JournalReplay::NamespaceIndex(std::string_view ns) {
  if (last_index_ != UINT32_MAX && ns == last_ns_) return last_index_;
  last_ns_.assign(ns);
  auto it = ns_index_.find(last_ns_);
  if (it == ns_index_.end()) {
    if (!IsJournalNamespace(ns)) {
      last_index_ = UINT32_MAX;
      return std::nullopt;
    }
    it = ns_index_.emplace(last_ns_, static_cast<uint32_t>(snapshot_.namespaces.size())).first;
    snapshot_.namespaces.push_back(last_ns_);
  }
  last_index_ = it->second;
  return last_index_;
}

void JournalReplay::Reserve(uint64_t bytes) {
  // The file's size is a hint, not a count: a damaged or planted JOURNAL can be any size (a
  // sparse terabyte reads as zeros after its records). Past what rotation lets a journal reach
  // (twice the 32 MiB default), the arrays grow with the records actually decoded instead.
  bytes = std::min<uint64_t>(bytes, kMostReservedBytes);
  // An empty journal (every clean close leaves one) adds nothing: reserving room for "one more"
  // entry reallocated and copied a full INDEX's entries (165 MB at a million blocks, 0.2 s).
  if (bytes == 0) return;
  size_t records = static_cast<size_t>(bytes / kSmallestCommit) + 1;
  snapshot_.entries.reserve(snapshot_.entries.size() + records);
  AdviseHugePages(snapshot_.entries);
  table_.Reserve(snapshot_.entries, snapshot_.entries.size() + records);
}

size_t JournalReplay::Add(std::span<const uint8_t> bytes) {
  std::vector<SnapshotEntry>& entries = snapshot_.entries;
  size_t at = 0;
  for (;; ++records_) {
    RecordView v = ViewRecord(bytes.subspan(at));
    if (v.length == 0) break;
    std::optional<uint32_t> ns = NamespaceIndex(v.ns);
    if (!ns) break;  // damaged, or planted
    // Decoded in place: a commit's entry stays, a removal's is only its key.
    SnapshotEntry& e = entries.emplace_back();
    if (!ReadBody(v, e)) {
      entries.pop_back();
      break;
    }
    at += v.length;
    e.ns = *ns;
    if (v.kind == kCommit) {
      table_.Put(entries, static_cast<uint32_t>(entries.size() - 1));
    } else {
      table_.Drop(entries, e.ns, e.block);
      entries.pop_back();
    }
  }
  return at;
}

}  // namespace gpucache
