// The index journal: every block committed to or removed from one data directory since its
// INDEX snapshot (store/index_snapshot.h) was written, appended as it happens. A start after a
// crash reads INDEX, then replays the journal(s) over it, and gets what a clean shutdown's
// snapshot would have said, without reading every block header again.
//
// Trust is the snapshot's: the journal only saves work, never checks. An entry is used only
// when the file at its path is still the very file it describes (inode, size, ctime); anything
// else is read in full, and a block file without an entry is found by the directory walk and
// read too. So a journal that lost its tail in a power cut, or a commit appended a moment
// before its block was indexed, costs a header read, nothing more.
//
// Files, in each data directory: JOURNAL (appended to), and JOURNAL.old while a rotation is
// under way (store/file_store_journal.cc): replayed in that order, after INDEX. A start after a
// crash may keep JOURNAL as it is (its torn tail cut) and go on appending to it, so INDEX is
// not rewritten on the way up; the journal is folded into INDEX at a rotation, a clean close,
// or, when a start found it past half the rotation size, once that start's check of the block
// files is done (before it, with several data directories).
//
// Format (little-endian), one record after another, each: u32 length of the rest, u8 kind
// (1 commit, 2 removal), u16 length + "tenant/ns", then the snapshot entry's fields (for a
// removal only the 16-byte block name), then the XXH3-64 of the record before it. A record cut
// short or failing its sum ends the replay there (a crash in mid-append).
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <optional>
#include <vector>

#include "store/index_snapshot.h"

namespace gpucache {

inline constexpr char kJournalFile[] = "JOURNAL";
inline constexpr char kOldJournalFile[] = "JOURNAL.old";

struct JournalRecord {
  bool removal = false;
  std::string ns;       // "tenant/namespace"
  SnapshotEntry entry;  // entry.ns is not used; a removal uses only entry.block
};

Bytes EncodeJournalRecord(const JournalRecord& record);
// The whole records at the start of `bytes`, in order.
std::vector<JournalRecord> DecodeJournal(std::span<const uint8_t> bytes);
// `snapshot` as it stands after `records`, applied in order (a commit replaces any entry of the
// same block; a removal drops it). The entries come out sorted by (ns, block).
void ApplyJournal(IndexSnapshot& snapshot, const std::vector<JournalRecord>& records);

// Which entry of an entry array is each block's, found by (namespace, block): an open-addressing
// hash table of indexes into the array (the array is passed to every call, never copied). A
// later entry of a block replaces the earlier; a removal hides it. The start looks INDEX and
// journal entries up through it where it used to sort and copy them all (docs/performance.md,
// "Restart"). Superseded entries stay in the array, unused.
class EntryTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  using Entries = std::vector<SnapshotEntry>;
  // Entry `index` (< 2^31 - 1) becomes its block's.
  void Put(const Entries& entries, uint32_t index);
  // (ns, block) has no entry from now on.
  void Drop(const Entries& entries, uint32_t ns, const BlockDigest& block);
  // The index of (ns, block)'s entry, or kNone.
  uint32_t Find(const Entries& entries, uint32_t ns, const BlockDigest& block) const;
  // Room for `keys` blocks without growing.
  void Reserve(const Entries& entries, size_t keys);
  // How many blocks have an entry.
  size_t live() const { return live_; }
  // One bit per element of `entries`, set for every block's entry: walked in index order, a
  // pass reads `entries` front to back. (In slot order every entry was a cache miss: a third
  // of a start over 1,000,000 blocks, docs/performance.md, "The loader at a million blocks".)
  std::vector<uint64_t> LiveBits(const Entries& entries) const {
    std::vector<uint64_t> live((entries.size() + 63) / 64);
    for (uint64_t s : slots_) {
      if (s != kEmpty && (s & kDropped) == 0) {
        uint64_t i = s & kIndex;
        live[i / 64] |= uint64_t{1} << (i % 64);
      }
    }
    return live;
  }
  // Calls `visit(index)` for every block's entry, in index order (LiveBits).
  template <class Visit>
  void ForEachLive(const Entries& entries, const Visit& visit) const {
    std::vector<uint64_t> live = LiveBits(entries);
    for (size_t word = 0; word < live.size(); ++word) {
      for (uint64_t w = live[word]; w != 0; w &= w - 1) {
        visit(static_cast<uint32_t>(word * 64 + static_cast<size_t>(std::countr_zero(w))));
      }
    }
  }

 private:
  // A slot: the entry's index in its low 32 bits, the top of its key's hash in the high 32, so
  // that a probe past other keys rarely reads their entries (a cache miss each).
  static constexpr uint64_t kEmpty = UINT64_MAX;
  static constexpr uint64_t kDropped = 1u << 31;  // on a slot: its block was removed
  static constexpr uint64_t kIndex = kDropped - 1;
  // The slot holding (ns, block), whose key hashes to `hash`, or the empty one where it goes.
  size_t SlotOf(const Entries& entries, uint64_t hash, uint32_t ns, const BlockDigest& block) const;
  void Rehash(const Entries& entries, size_t slots);
  std::vector<uint64_t> slots_;  // a power of two of them, at most half used
  size_t used_ = 0;
  size_t live_ = 0;
};

// The start's replay: journal files fed in order over a snapshot, decoded as they are read (no
// record is copied out) and applied to an EntryTable as they come: no sort, no second copy of
// the entries. Equivalent to ApplyJournal over DecodeJournal of each file.
class JournalReplay {
 public:
  // Puts the snapshot's entries in the table (a later one of the same block wins).
  explicit JournalReplay(IndexSnapshot& snapshot);
  // Takes the whole records at the start of `bytes`, up to a torn or damaged one (or the end;
  // a record whose namespace is no valid "tenant/namespace" is damaged): how many bytes they
  // span. Called again with what follows them and more, it goes on.
  // A commit's entry is appended to the snapshot's entries.
  size_t Add(std::span<const uint8_t> bytes);
  size_t records() const { return records_; }
  // Room for about `bytes` more of records (one allocation instead of a doubling per few
  // thousand records).
  void Reserve(uint64_t bytes);
  // Which of the snapshot's entries stand after the records, by block.
  EntryTable Finish() { return std::move(table_); }

 private:
  // The namespace's index in the snapshot's names, added if new; nullopt if `ns` is no valid
  // "tenant/namespace".
  std::optional<uint32_t> NamespaceIndex(std::string_view ns);

  IndexSnapshot& snapshot_;
  EntryTable table_;
  // snapshot_.namespaces by name: a planted journal of many namespaces must not make each
  // record's lookup a walk of all of them (quadratic: 80,000 took 4.5 s).
  std::unordered_map<std::string, uint32_t> ns_index_;
  std::string last_ns_;          // consecutive records mostly share one namespace
  uint32_t last_index_ = UINT32_MAX;
  size_t records_ = 0;
};

}  // namespace gpucache
