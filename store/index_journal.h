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
// under way (store/file_store.cc): replayed in that order, after INDEX.
//
// Format (little-endian), one record after another, each: u32 length of the rest, u8 kind
// (1 commit, 2 removal), u16 length + "tenant/ns", then the snapshot entry's fields (for a
// removal only the 16-byte block name), then the XXH3-64 of the record before it. A record cut
// short or failing its sum ends the replay there (a crash in mid-append).
#pragma once

#include <cstdint>
#include <span>
#include <string>
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
// same block; a removal drops it).
void ApplyJournal(IndexSnapshot& snapshot, const std::vector<JournalRecord>& records);

}  // namespace gpucache
