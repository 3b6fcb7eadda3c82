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

Verdict FileMedium::VerifyBlock(const BlockAddress& address, const StoredPayload* stored) {
  if (!walk_started_) return {};
  size_t dev = DeviceOf(stored);
  std::optional<JournalRecord> read;
  Verdict v = loader_->VerifyBlock(address, PathIn(dev, address), read);
  if (read) Append(dev, *read);
  return v;
}

bool FileMedium::NextWalkItem(WalkItem& item) { return loader_->NextWalkItem(item); }

Verdict FileMedium::CheckWalkItem(const WalkItem& item) {
  std::optional<JournalRecord> read;
  Verdict v = loader_->CheckWalkItem(item, read);
  if (read) Append(walk_dev_, *read);
  return v;
}

Result<BlockInfo> FileMedium::ReadWalkItem(const WalkItem& item) { return loader_->ReadWalkItem(item); }

void FileMedium::AdoptedWalkItem(const WalkItem& item) {
  if (std::optional<JournalRecord> r = loader_->AdoptedWalkItem(item)) Append(walk_dev_, *r);
}

MediumReport FileMedium::EndWalk(bool completed, std::span<const BlockAddress> missing,
                                 const WalkCounts& counts, const BlockLister& blocks) {
  MediumReport report = loader_->EndWalk(completed, counts);
  if (completed) {
    for (const BlockAddress& a : missing) {
      report.missing++;
      JournalRemoval(walk_dev_, a);  // the next start need not look for it
    }
  }
  // As after an eager load (IndexedStore::Load): glibc keeps the freed entries' pages resident
  // in the heap's holes; handing them back makes the resident set what the index holds.
  ::malloc_trim(0);
  walk_completed_ = completed;
  // A start folds a journal past half its rotation size (the next start replays less); it
  // kept it to open without checking files first, and can fold it only now that every indexed
  // block is checked. Before the store reports the walk done: who waits for the walk finds the
  // journal folded.
  if (completed) FoldJournalPast(walk_dev_, journal_rotate_bytes_ / 2, blocks);
  walk_over_.store(true, std::memory_order_release);
  return report;
}

}  // namespace gpucache
