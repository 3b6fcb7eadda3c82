// FileMedium: what goes into the index journal of each data directory (its files are the
// device's IndexLog, store/index_log.h): appended to by commits, removals and the start's walk,
// folded into INDEX when it grows. A start keeps or folds it (store/file_loader.cc).
#include <malloc.h>

#include <cerrno>
#include <cstring>

#include "store/env.h"
#include "store/file_store.h"
#include "store/file_store_located.h"
#include "store/index_entry.h"

namespace gpucache {

void FileMedium::Append(size_t dev, const JournalRecord& record) {
  uint64_t journal_bytes = 0;
  if (logs_[dev]->Append(record, &journal_bytes) != StatusCode::kOk) CountError();
  // The store folds it (FoldJournal) after the commit or removal that appended. Not while the
  // start's walk runs (adr/0016): the INDEX a fold writes would take the unchecked blocks as
  // checked. The first append after the walk asks again.
  if (walk_over_.load(std::memory_order_acquire) && journal_bytes > journal_rotate_bytes_) {
    fold_due_.store(true, std::memory_order_relaxed);
  }
}

void FileMedium::Upkeep::FoldJournal(const BlockLister& blocks) {
  if (!m_.fold_due_.exchange(false)) return;  // another thread took it
  for (size_t dev = 0; dev < m_.logs_.size(); ++dev) m_.FoldJournalPast(dev, m_.journal_rotate_bytes_, blocks);
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
  r.entry = EntryOf(IndexedBlockOf(draft, keys), ParseBlockName(sums.digest_hex).value_or(BlockDigest{}),
                    st.value());
  Append(dev, r);
}

void FileMedium::JournalRemoval(size_t dev, const BlockAddress& address) {
  JournalRecord r;
  r.removal = true;
  r.ns = address.tenant + "/" + address.ns;
  r.entry.block = ParseBlockName(address.block).value_or(BlockDigest{});
  Append(dev, r);
}

// --- The walk after a start (adr/0016): the loader checks, the journal here records ----------

Verdict FileMedium::Upkeep::VerifyBlock(const BlockAddress& address, const StoredPayload* stored) {
  if (!m_.walk_started_) return {};
  size_t dev = DeviceOf(stored);
  std::optional<JournalRecord> read;
  Verdict v = m_.loader_->VerifyBlock(address, m_.PathIn(dev, address), read);
  if (read) m_.Append(dev, *read);
  return v;
}

bool FileMedium::Upkeep::NextWalkItem(WalkItem& item) { return m_.loader_->NextWalkItem(item); }

Verdict FileMedium::Upkeep::CheckWalkItem(const WalkItem& item) {
  std::optional<JournalRecord> read;
  Verdict v = m_.loader_->CheckWalkItem(item, read);
  if (read) m_.Append(m_.walk_dev_, *read);
  return v;
}

Result<BlockInfo> FileMedium::Upkeep::ReadWalkItem(const WalkItem& item) {
  return m_.loader_->ReadWalkItem(item);
}

void FileMedium::Upkeep::AdoptedWalkItem(const WalkItem& item) {
  if (std::optional<JournalRecord> r = m_.loader_->AdoptedWalkItem(item)) m_.Append(m_.walk_dev_, *r);
}

MediumReport FileMedium::Upkeep::EndWalk(bool completed, std::span<const BlockAddress> missing,
                                         const WalkCounts& counts, const BlockLister& blocks) {
  MediumReport report = m_.loader_->EndWalk(completed, counts);
  if (completed) {
    for (const BlockAddress& a : missing) {
      report.missing++;
      m_.JournalRemoval(m_.walk_dev_, a);  // the next start need not look for it
    }
  }
  // As after an eager load (IndexedStore::Load): glibc keeps the freed entries' pages resident
  // in the heap's holes; handing them back makes the resident set what the index holds.
  ::malloc_trim(0);
  m_.walk_completed_ = completed;
  // A start folds a journal past half its rotation size (the next start replays less); it
  // kept it to open without checking files first, and can fold it only now that every indexed
  // block is checked. Before the store reports the walk done: who waits for the walk finds the
  // journal folded.
  if (completed) m_.FoldJournalPast(m_.walk_dev_, m_.journal_rotate_bytes_ / 2, blocks);
  m_.walk_over_.store(true, std::memory_order_release);
  return report;
}

}  // namespace gpucache
