// FileMedium: what goes into the index journal of each data directory (its files are the
// device's IndexLog, store/index_log.h): kept or folded into INDEX once the start has checked
// it, appended to by commits and removals, folded when it grows.
#include <cerrno>
#include <cstring>

#include "store/env.h"
#include "store/file_store.h"
#include "store/file_store_located.h"

namespace gpucache {

// After a device loaded. A journal that INDEX and the start's checks left standing is kept,
// its torn tail cut and the entries this start had to read in full appended: the next start
// replays it again, and nothing here is paid for on the way up. Otherwise what the start
// verified becomes INDEX (unless INDEX already says exactly that) and the journal starts
// empty. A rotation left half-done (JOURNAL.old) is always folded.
void FileMedium::StartJournal(size_t dev) {
  if (used_.size() != snapshot_table_.live()) index_current_ = false;
  bool keep = index_whole_ && !old_journal_.exists && old_journal_.readable && journal_.exists &&
              journal_.readable && journal_.valid_bytes > 0 &&
              journal_.valid_bytes < journal_rotate_bytes_ / 2;
  if (keep && KeepJournal(dev)) {
    // kept
  } else {
    if (!index_current_) logs_[dev]->Write(Verified());
    logs_[dev]->Empty();
  }
  loaded_ = IndexSnapshot{};
  used_.clear();
  used_.shrink_to_fit();
  ns_of_snapshot_.clear();
}

bool FileMedium::KeepJournal(size_t dev) {
  std::vector<JournalRecord> records;  // the blocks read in full
  records.reserve(loaded_.entries.size());
  for (const SnapshotEntry& e : loaded_.entries) {
    JournalRecord& r = records.emplace_back();
    r.ns = loaded_.namespaces[e.ns];
    r.entry = e;
  }
  return logs_[dev]->Keep(journal_, records);
}

void FileMedium::Append(size_t dev, const JournalRecord& record) {
  if (logs_[dev]->Append(record) != StatusCode::kOk) CountError();
  // The store folds it (FoldJournal) after the commit or removal that appended. Not while the
  // start's walk runs (adr/0016): the INDEX a fold writes would take the unchecked blocks as
  // checked. The first append after the walk asks again.
  if (walk_over_.load(std::memory_order_acquire) && logs_[dev]->JournalBytes() > journal_rotate_bytes_) {
    fold_due_.store(true, std::memory_order_relaxed);
  }
}

void FileMedium::FoldJournal(const BlockLister& blocks) {
  if (!fold_due_.exchange(false)) return;  // another thread took it
  for (size_t dev = 0; dev < logs_.size(); ++dev) FoldJournalPast(dev, journal_rotate_bytes_, blocks);
}

void FileMedium::FoldJournalPast(size_t dev, uint64_t limit, const BlockLister& blocks) {
  switch (logs_[dev]->Rotate(limit)) {
    case IndexLog::Rotation::kNotDue: return;
    case IndexLog::Rotation::kFailed: CountError(); return;  // the next append tries again
    case IndexLog::Rotation::kNoJournal: CountError(); break;  // INDEX below covers it
    case IndexLog::Rotation::kRotated: break;
  }
  SaveSnapshot(dev, blocks);  // on this thread: about a second per million blocks, once per 64 MiB
  logs_[dev]->EndRotation();
}

void FileMedium::JournalCommit(size_t dev, int fd, const BlockInfo& draft, const IndexKeys& keys,
                               const PayloadChecksums& sums) {
  Result<FileStat> st = env_.StatFd(fd);
  if (!st.ok()) return;  // without it the entry would never match: leave it out
  JournalRecord r;
  r.ns = draft.address.tenant + "/" + draft.address.ns;
  r.entry = EntryOf(draft, keys,
                    ParseBlockName(sums.digest_hex).value_or(BlockDigest{}), st.value());
  Append(dev, r);
}

void FileMedium::JournalRemoval(size_t dev, const BlockAddress& address) {
  JournalRecord r;
  r.removal = true;
  r.ns = address.tenant + "/" + address.ns;
  r.entry.block = ParseBlockName(address.block).value_or(BlockDigest{});
  Append(dev, r);
}

}  // namespace gpucache
