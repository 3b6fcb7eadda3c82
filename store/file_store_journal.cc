// FileStore: the index journal (store/index_journal.h) of each data directory: replayed at
// start, kept or folded into INDEX once the start has checked it, appended to by commits and
// removals, rotated when it grows. Every file operation goes through Env.
#include <cerrno>
#include <cstring>

#include "store/env.h"
#include "store/file_store.h"
#include "store/file_store_located.h"

namespace gpucache {

FileMedium::JournalRead FileMedium::ReplayFile(JournalReplay& replay, const std::string& path) {
  JournalRead read;
  int opened = env_.OpenRead(path);
  if (opened < 0) {
    read.readable = opened == -ENOENT;
    return read;
  }
  read.exists = true;
  Fd fd(opened);
  if (Result<FileStat> st = env_.StatFd(fd.get()); st.ok()) replay.Reserve(st->size);
  // In pieces through one buffer: no allocation the size of the file, a record cut by a piece's
  // end is taken with the next piece.
  Bytes buffer(kReplayPiece);
  size_t have = 0;
  uint64_t offset = 0;
  for (;;) {
    Result<size_t> n = env_.ReadUpTo(fd.get(), {buffer.data() + have, buffer.size() - have}, offset);
    if (!n.ok()) {
      read.readable = false;  // what was replayed stands; the rest is unknown
      return read;
    }
    offset += n.value();
    have += n.value();
    size_t used = replay.Add({buffer.data(), have});
    read.valid_bytes += used;
    std::memmove(buffer.data(), buffer.data() + used, have - used);
    have -= used;
    // The end of the file (what is left is a torn record), or a damaged record that fills the
    // buffer without parsing: the replay ends there either way.
    if (n.value() == 0 || (used == 0 && have == buffer.size())) break;
  }
  read.torn = have != 0 || offset != read.valid_bytes;
  return read;
}

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
    if (!index_current_) WriteReplacing(devices_[dev].dir.File(kSnapshotFile), EncodeSnapshot(Verified()));
    EmptyJournal(dev);
  }
  loaded_ = IndexSnapshot{};
  used_.clear();
  used_.shrink_to_fit();
  ns_of_snapshot_.clear();
}

bool FileMedium::KeepJournal(size_t dev) {
  JournalFile& j = *journals_[dev];
  MutexLock lock(j.mu);
  int opened = env_.OpenAppend(devices_[dev].dir.File(kJournalFile), /*truncate=*/false);
  if (opened < 0) return false;
  Fd fd(opened);
  // Appended after a torn record, new records would never be replayed.
  if (journal_.torn && env_.Truncate(fd.get(), journal_.valid_bytes) != StatusCode::kOk) return false;
  uint64_t bytes = journal_.valid_bytes;
  for (const SnapshotEntry& e : loaded_.entries) {  // the blocks read in full
    JournalRecord r;
    r.ns = loaded_.namespaces[e.ns];
    r.entry = e;
    Bytes record = EncodeJournalRecord(r);
    if (env_.Append(fd.get(), record) != StatusCode::kOk) return false;
    bytes += record.size();
  }
  j.fd = std::move(fd);
  j.bytes = bytes;
  return true;
}

void FileMedium::EmptyJournal(size_t dev) {
  JournalFile& j = *journals_[dev];
  MutexLock lock(j.mu);
  int opened = env_.OpenAppend(devices_[dev].dir.File(kJournalFile), /*truncate=*/true);
  j.fd = Fd(opened >= 0 ? opened : -1);
  j.bytes = 0;
  env_.Remove(devices_[dev].dir.File(kOldJournalFile));
}

void FileMedium::Append(size_t dev, const JournalRecord& record) {
  JournalFile& j = *journals_[dev];
  Bytes bytes = EncodeJournalRecord(record);
  {
    MutexLock lock(j.mu);
    if (!j.fd.valid()) return;  // not started (loading) or could not be opened: INDEX is checked anyway
    // One write per record, O_APPEND: a crash leaves whole records and at most one torn one.
    if (env_.Append(j.fd.get(), bytes) != StatusCode::kOk) CountError();
    j.bytes += bytes.size();
    // The store folds it (FoldJournal) after the commit or removal that appended. Not while
    // the start's walk runs (adr/0016): the INDEX a fold writes would take the unchecked blocks
    // as checked. The first append after the walk asks again.
    if (j.bytes > journal_rotate_bytes_ && walk_over_.load(std::memory_order_acquire)) {
      fold_due_.store(true, std::memory_order_relaxed);
    }
  }
}

void FileMedium::FoldJournal(const BlockLister& blocks) {
  if (!fold_due_.exchange(false)) return;  // another thread took it
  for (size_t dev = 0; dev < journals_.size(); ++dev) FoldJournalPast(dev, journal_rotate_bytes_, blocks);
}

void FileMedium::FoldJournalPast(size_t dev, uint64_t limit, const BlockLister& blocks) {
  JournalFile& j = *journals_[dev];
  {
    MutexLock lock(j.mu);
    if (!j.fd.valid() || j.bytes <= limit) return;
    // From here on, appends go to a fresh JOURNAL; JOURNAL.old is replayed before it at a
    // start until the INDEX below replaces both. If the rename fails, JOURNAL goes on growing
    // and the next append tries again: no record is dropped.
    const DataDir& dir = devices_[dev].dir;
    if (env_.Rename(dir.File(kJournalFile), dir.File(kOldJournalFile)) != StatusCode::kOk) {
      CountError();
      return;
    }
    int opened = env_.OpenAppend(dir.File(kJournalFile), /*truncate=*/true);
    if (opened < 0) CountError();  // no journal until the next start: INDEX below covers it
    j.fd = Fd(opened >= 0 ? opened : -1);
    j.bytes = 0;
  }
  SaveSnapshot(dev, blocks);  // on this thread: about a second per million blocks, once per 64 MiB
  env_.Remove(devices_[dev].dir.File(kOldJournalFile));
}

void FileMedium::JournalCommit(size_t dev, int fd, const BlockInfo& draft,
                               const PayloadChecksums& sums) {
  Result<FileStat> st = env_.StatFd(fd);
  if (!st.ok()) return;  // without it the entry would never match: leave it out
  JournalRecord r;
  r.ns = draft.address.tenant + "/" + draft.address.ns;
  r.entry = EntryOf(draft, IndexKeysOf(draft.identity, draft.canonical_identity),
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
