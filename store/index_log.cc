// IndexLog: INDEX and the journal of one data directory (store/index_log.h).
#include "store/index_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpucache {
// An INDEX (153 bytes a block) or PINS (a path a pinned block) longer than a quarter of the
// machine's memory names more blocks than the index could hold (a block costs about as much in
// memory): damaged or planted.
uint64_t MostMetadataBytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 4;
}

std::optional<Bytes> ReadBounded(Env& env, const std::string& path) {
  int opened = env.OpenRead(path);
  if (opened < 0) return std::nullopt;
  Fd fd(opened);
  Result<FileStat> st = env.StatFd(fd.get());
  if (!st.ok() || st->size > MostMetadataBytes()) return std::nullopt;
  Bytes bytes(static_cast<size_t>(st->size));
  if (env.Read(fd.get(), bytes, 0) != StatusCode::kOk) return std::nullopt;
  return bytes;
}

std::optional<IndexSnapshot> IndexLog::ReadIndex() {
  int opened = env_.OpenRead(dir_.File(kSnapshotFile));
  if (opened < 0) return std::nullopt;
  Fd fd(opened);
  Result<FileStat> st = env_.StatFd(fd.get());
  if (!st.ok() || st->size > MostMetadataBytes()) return std::nullopt;
  // Mapped by the POSIX Env: decoded straight from the page cache (adr/0016's start budget).
  Result<std::unique_ptr<WholeFile>> bytes = env_.ReadWhole(fd.get(), st->size);
  if (!bytes.ok()) return std::nullopt;
  return DecodeSnapshot(bytes.value()->bytes());
}

IndexLog::JournalRead IndexLog::ReplayJournal(JournalReplay& replay, bool old) {
  JournalRead read;
  int opened = env_.OpenRead(dir_.File(old ? kOldJournalFile : kJournalFile));
  if (opened < 0) {
    read.readable = opened == -ENOENT;
    return read;
  }
  read.exists = true;
  Fd fd(opened);
  if (Result<FileStat> st = env_.StatFd(fd.get()); st.ok()) {
    replay.Reserve(st->size);
    read.size = st->size;
  }
  // In pieces through one buffer: no allocation the size of the file, a record cut by a piece's
  // end is taken with the next piece.
  gpucache::Bytes buffer(kReplayPiece);
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
    // Every record replayed is an entry in memory until the start ends: a planted JOURNAL of
    // valid records must not decide what a start allocates. Past the bound the rest is unknown,
    // as after a read error, and the start checks every file instead.
    size_t room = static_cast<size_t>(std::min<uint64_t>(have, most_replayed_ - replayed_ - read.valid_bytes));
    size_t used = replay.Add({buffer.data(), room});
    read.valid_bytes += used;
    if (room < have) {  // bytes past the bound, whatever they hold
      read.readable = false;
      replayed_ += read.valid_bytes;
      return read;
    }
    std::memmove(buffer.data(), buffer.data() + used, have - used);
    have -= used;
    // The end of the file (what is left is a torn record), or a damaged record that fills the
    // buffer without parsing: the replay ends there either way.
    if (n.value() == 0 || (used == 0 && have == buffer.size())) break;
  }
  read.torn = have != 0 || offset != read.valid_bytes;
  replayed_ += read.valid_bytes;
  return read;
}

bool IndexLog::Keep(const JournalRead& read, std::span<const JournalRecord> records) {
  MutexLock lock(mu_);
  // If this fails, the next Append opens JOURNAL again keeping what is whole so far.
  reopen_empty_ = false;
  bytes_ = read.valid_bytes;
  int opened = env_.OpenAppend(dir_.File(kJournalFile), /*truncate=*/false);
  if (opened < 0) return false;
  Fd fd(opened);
  // Appended after a torn record, new records would never be replayed.
  if (read.torn && env_.Truncate(fd.get(), read.valid_bytes) != StatusCode::kOk) return false;
  uint64_t bytes = read.valid_bytes;
  for (const JournalRecord& r : records) {
    gpucache::Bytes record = EncodeJournalRecord(r);
    if (env_.Append(fd.get(), record) != StatusCode::kOk) return false;
    bytes += record.size();
    bytes_ = bytes;
  }
  fd_ = std::move(fd);
  bytes_ = bytes;
  return true;
}

StatusCode IndexLog::Append(const JournalRecord& record, uint64_t* journal_bytes) {
  gpucache::Bytes bytes = EncodeJournalRecord(record);
  MutexLock lock(mu_);
  if (journal_bytes) *journal_bytes = 0;
  // A JOURNAL that an emptying or a rotation could not open is tried again at every record
  // rather than left off for the daemon's life: the open is one call where the commit made
  // several, and each record it cannot write is an error for the caller to count.
  if (!fd_.valid()) {
    if (!reopen_empty_) {
      if (StatusCode s = OpenKept(); s != StatusCode::kOk) return s;
    } else if (int failed = OpenEmpty(); failed < 0) {
      return StatusFromErrno(-failed);
    }
  }
  StatusCode s = env_.Append(fd_.get(), bytes);
  if (s != StatusCode::kOk) {
    // A record torn part-way ends what a start replays: every later record would be lost to
    // it. Cut it off; if that fails too, the next record opens JOURNAL again and cuts it there
    // (OpenKept), keeping the whole records before it.
    if (env_.Truncate(fd_.get(), bytes_) != StatusCode::kOk) {
      fd_ = Fd(-1);
      reopen_empty_ = false;
    }
    if (journal_bytes) *journal_bytes = bytes_;
    return s;
  }
  bytes_ += bytes.size();
  if (journal_bytes) *journal_bytes = bytes_;
  return s;
}

uint64_t IndexLog::JournalBytes() const {
  MutexLock lock(mu_);
  return fd_.valid() ? bytes_ : 0;
}

IndexLog::Rotation IndexLog::Rotate(uint64_t limit) {
  MutexLock lock(mu_);
  if (rotation_ == RotationState::kWriting || !fd_.valid() || bytes_ <= limit) return Rotation::kNotDue;
  if (rotation_ == RotationState::kUnwritten) {  // INDEX again; JOURNAL.old and JOURNAL stay
    rotation_ = RotationState::kWriting;
    return Rotation::kRotated;
  }
  if (env_.Rename(dir_.File(kJournalFile), dir_.File(kOldJournalFile)) != StatusCode::kOk) {
    return Rotation::kFailed;
  }
  rotation_ = RotationState::kWriting;
  return OpenEmpty() >= 0 ? Rotation::kRotated : Rotation::kNoJournal;
}

void IndexLog::EndRotation(bool written) {
  MutexLock lock(mu_);
  if (!written) {
    rotation_ = RotationState::kUnwritten;
    return;
  }
  env_.Remove(dir_.File(kOldJournalFile));
  rotation_ = RotationState::kNone;
}

bool IndexLog::StampAndWrite(IndexSnapshot index) {
  std::string base = dir_.Blocks() + "/", path;
  size_t kept = 0;
  for (SnapshotEntry& e : index.entries) {
    path.assign(base).append(index.namespaces[e.ns]).append("/").append(FormatBlockName(e.block));
    Result<FileStat> st = env_.StatAt(-1, path);
    if (!st.ok()) continue;
    e.inode = st->inode;
    e.file_size = st->size;
    e.ctime_sec = st->ctime_sec;
    e.ctime_nsec = st->ctime_nsec;
    index.entries[kept++] = e;
  }
  index.entries.resize(kept);
  return Write(index);
}

bool IndexLog::Write(const IndexSnapshot& index) {
  const std::string path = dir_.File(kSnapshotFile);
  const std::string tmp = path + ".tmp";
  env_.Remove(tmp);  // left by a crash in mid-write
  int created = env_.CreateExclusive(tmp);
  if (created < 0) return false;
  Fd fd(created);
  if (env_.Write(fd.get(), EncodeSnapshot(index), 0) != StatusCode::kOk) {
    env_.Remove(tmp);
    return false;
  }
  fd.Reset();
  if (env_.Rename(tmp, path) != StatusCode::kOk) {
    env_.Remove(tmp);
    return false;
  }
  return true;
}

void IndexLog::Empty() {
  MutexLock lock(mu_);
  OpenEmpty();  // if it fails, the next Append tries again
  rotation_ = RotationState::kNone;
  env_.Remove(dir_.File(kOldJournalFile));
}

int IndexLog::OpenEmpty() {
  int opened = env_.OpenAppend(dir_.File(kJournalFile), /*truncate=*/true);
  fd_ = Fd(opened >= 0 ? opened : -1);
  bytes_ = 0;
  reopen_empty_ = true;
  return opened;
}

StatusCode IndexLog::OpenKept() {
  int opened = env_.OpenAppend(dir_.File(kJournalFile), /*truncate=*/false);
  if (opened < 0) return StatusFromErrno(-opened);
  Fd fd(opened);
  if (StatusCode s = env_.Truncate(fd.get(), bytes_); s != StatusCode::kOk) return s;
  fd_ = std::move(fd);
  return StatusCode::kOk;
}

}  // namespace gpucache
