// FileMedium: what goes into the index journal of each data directory (its files are the
// device's IndexLog, store/index_log.h): appended to by commits, removals and the start's walk,
// folded into INDEX when it grows. A start keeps or folds it (store/file_loader.cc).
#include <malloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "store/env.h"
#include "store/file_store.h"
#include "store/located_file.h"
#include "store/index_entry.h"
#include "store/snapshot_writer.h"

namespace gpucache {

void FileMedium::Append(size_t dev, const JournalRecord& record) {
  uint64_t journal_bytes = 0;
  if (logs_[dev]->Append(record, &journal_bytes) != StatusCode::kOk) CountMetadataError();
  // The store folds it (FoldJournal) after the commit or removal that appended. Not while the
  // start's walk runs (adr/0016): the INDEX a fold writes would take the unchecked blocks as
  // checked. The first append after the walk asks again.
  if (walk_over_.load(std::memory_order_acquire) && journal_bytes > journal_rotate_bytes_) {
    fold_due_.store(true, std::memory_order_relaxed);
  }
}

std::unique_ptr<IndexWriter> FileMedium::Upkeep::FoldJournal() {
  if (!m_.fold_due_.exchange(false)) return nullptr;  // another thread took it
  std::vector<size_t> due;
  for (size_t dev = 0; dev < m_.logs_.size(); ++dev) {
    if (m_.RotateJournalPast(dev, m_.journal_rotate_bytes_)) due.push_back(dev);
  }
  if (due.empty()) return nullptr;
  // Written on this thread: about a second per million blocks, once per 64 MiB of journal.
  return std::make_unique<SnapshotWriter>(m_.logs_, due, [this, due](const std::vector<size_t>& written) {
    m_.EndRotations(due, written);
  });
}

bool FileMedium::RotateJournalPast(size_t dev, uint64_t limit) {
  switch (logs_[dev]->Rotate(limit)) {
    case IndexLog::Rotation::kNotDue: return false;
    case IndexLog::Rotation::kFailed: CountMetadataError(); return false;  // the next append tries again
    case IndexLog::Rotation::kNoJournal: CountMetadataError(); return true;  // the INDEX written covers it
    case IndexLog::Rotation::kRotated: return true;
  }
  return false;
}

void FileMedium::EndRotations(const std::vector<size_t>& devs, const std::vector<size_t>& written) {
  for (size_t dev : devs) {
    // An INDEX that could not be written (a full disk) keeps JOURNAL.old, which holds what the
    // old INDEX lacks; the next rotation writes INDEX again.
    bool ok = std::find(written.begin(), written.end(), dev) != written.end();
    if (!ok) CountMetadataError();
    logs_[dev]->EndRotation(ok);
  }
}

void FileMedium::JournalCommit(size_t dev, int fd, const BlockInfo& draft,
                               const PayloadChecksums& sums) {
  Result<FileStat> st = env_.StatFd(fd);
  if (!st.ok()) return;  // without it the entry would never match: leave it out
  JournalRecord r;
  r.ns = draft.address.tenant + "/" + draft.address.ns;
  r.entry = EntryOf(draft, ParseBlockName(sums.digest_hex).value_or(BlockDigest{}),
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

MediumUpkeep::WalkEnd FileMedium::Upkeep::EndWalk(bool completed, std::span<const BlockAddress> missing,
                                                  const WalkCounts& counts) {
  WalkEnd end{.report = m_.loader_->EndWalk(completed, counts)};
  if (completed) {
    for (const BlockAddress& a : missing) {
      end.report.missing++;
      m_.JournalRemoval(m_.walk_dev_, a);  // the next start need not look for it
    }
  }
  // As after an eager load (IndexedStore::Load): glibc keeps the freed entries' pages resident
  // in the heap's holes; handing them back makes the resident set what the index holds.
  ::malloc_trim(0);
  m_.walk_completed_ = completed;
  // A start folds a journal past half its rotation size (the next start replays less); it
  // kept it to open without checking files first, and can fold it only now that every indexed
  // block is checked. The store writes the INDEX before it reports the walk done: who waits for
  // the walk finds the journal folded. Appends may ask for a fold again once it is written.
  const size_t dev = m_.walk_dev_;
  if (completed && m_.RotateJournalPast(dev, m_.journal_rotate_bytes_ / 2)) {
    end.index = std::make_unique<SnapshotWriter>(m_.logs_, std::vector<size_t>{dev},
                                                 [this, dev](const std::vector<size_t>& written) {
      m_.EndRotations({dev}, written);
      m_.walk_over_.store(true, std::memory_order_release);
    });
  } else {
    m_.walk_over_.store(true, std::memory_order_release);
  }
  return end;
}

}  // namespace gpucache
