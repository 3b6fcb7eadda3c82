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
// or a start that finds it past half the rotation size.
//
// Format (little-endian), one record after another, each: u32 length of the rest, u8 kind
// (1 commit, 2 removal), u16 length + "tenant/ns", then the snapshot entry's fields (for a
// removal only the 16-byte block name), then the XXH3-64 of the record before it. A record cut
// short or failing its sum ends the replay there (a crash in mid-append).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
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

// The start's replay: journal files fed in order over a snapshot, decoded as they are read (no
// record is copied out) and folded once, by one sort, at the end. Equivalent to ApplyJournal
// over DecodeJournal of each file, at a fraction of the cost (no map, no string per record).
class JournalReplay {
 public:
  explicit JournalReplay(IndexSnapshot& snapshot);
  // Takes the whole records at the start of `bytes`, up to a torn or damaged one (or the end):
  // how many bytes they span. Called again with what follows them and more, it goes on.
  size_t Add(std::span<const uint8_t> bytes);
  size_t records() const { return records_; }
  // Room for about `bytes` more of records (one allocation instead of a doubling per few
  // thousand records).
  void Reserve(uint64_t bytes);
  // Leaves the snapshot's entries as the records say, sorted by (ns, block).
  void Finish();

 private:
  struct Change {
    uint32_t ns;
    BlockDigest block;
    uint32_t entry;  // index into the snapshot's entries, or kGone for a removal
  };
  static constexpr uint32_t kGone = UINT32_MAX;
  uint32_t NamespaceIndex(std::string_view ns);

  IndexSnapshot& snapshot_;
  const size_t base_;            // entries the snapshot had before the journal
  std::vector<Change> changes_;  // in journal order
  std::string last_ns_;          // consecutive records mostly share one namespace
  uint32_t last_index_ = UINT32_MAX;
  size_t records_ = 0;
};

}  // namespace gpucache
