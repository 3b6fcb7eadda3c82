// FileStore: the index snapshot, written at a clean close and read at start
// (store/index_snapshot.h for the format and the trust rules).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>

#include "store/file_store.h"
#include "store/file_store_located.h"

namespace gpucache {

namespace {

// The bytes of `path`, or nothing if it cannot be read whole.
std::optional<Bytes> ReadWhole(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) return std::nullopt;
  Bytes bytes(static_cast<size_t>(st.st_size));
  if (PreadFull(fd.get(), bytes, 0) != StatusCode::kOk) return std::nullopt;
  return bytes;
}

// Replaces `path` with `bytes`, renamed into place but not synced: a torn or empty INDEX after
// a power cut fails its sum and costs one full scan, nothing else.
void WriteReplacing(const std::string& path, const Bytes& bytes) {
  std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid() || PwriteFull(fd.get(), bytes, 0) != StatusCode::kOk) {
    ::unlink(tmp.c_str());
    return;
  }
  fd.Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace

void FileMedium::LoadSnapshot(size_t dev) {
  const std::string& dir = devices_[dev].dir.root();
  IndexSnapshot snapshot;
  index_current_ = false;
  if (std::optional<Bytes> bytes = ReadWhole(dir + "/" + kSnapshotFile)) {
    if (std::optional<IndexSnapshot> decoded = DecodeSnapshot(*bytes)) {
      snapshot = std::move(*decoded);
      index_current_ = true;
    }
  }
  // What happened since INDEX was written (a crash left it; a rotation may have left two).
  JournalReplay replay(snapshot);
  for (const char* name : {kOldJournalFile, kJournalFile}) {
    if (std::optional<Bytes> bytes = ReadWhole(dir + "/" + name)) {
      if (replay.Add(*bytes) != 0) index_current_ = false;
    }
  }
  replay.Finish();  // sorted by (ns, block), as FromSnapshot looks entries up
  for (uint32_t i = 0; i < snapshot.namespaces.size(); ++i) {
    snapshot_namespaces_.emplace(std::move(snapshot.namespaces[i]), i);
  }
  snapshot_ = std::move(snapshot.entries);
  loaded_.entries.reserve(snapshot_.size());
  host().ReserveBlocks(snapshot_.size());
}

const SnapshotEntry* FileMedium::FromSnapshot(int dir_fd, const std::string& path, int64_t ns,
                                              const std::string& name) {
  if (ns < 0) return nullptr;
  std::optional<BlockDigest> block = ParseBlockName(name);
  if (!block) return nullptr;
  auto it = std::lower_bound(snapshot_.begin(), snapshot_.end(), std::pair(ns, *block),
                             [](const SnapshotEntry& e, const std::pair<int64_t, BlockDigest>& key) {
                               return std::tie(e.ns, e.block) < std::tie(key.first, key.second);
                             });
  if (it == snapshot_.end() || it->ns != ns || it->block != *block) return nullptr;
  const SnapshotEntry& e = *it;
  struct stat st {};
  int got = dir_fd >= 0 ? ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW)
                        : ::lstat(path.c_str(), &st);
  if (got != 0 || !S_ISREG(st.st_mode) || st.st_ino != e.inode ||
      static_cast<uint64_t>(st.st_size) != e.file_size || st.st_ctim.tv_sec != e.ctime_sec ||
      st.st_ctim.tv_nsec != e.ctime_nsec) {
    return nullptr;  // not the file the snapshot saw: read it in full
  }
  return &e;
}

void FileMedium::FillFromEntry(IndexedBlock& b, const SnapshotEntry& e) {
  b.size = e.size;
  b.commit_epoch = e.commit_epoch;
  b.region_id = e.region_id;
  b.owner = Owner{e.uid, e.gid};
  b.commit_time_ns = e.commit_time_ns;
  b.checksum = e.digest;
  b.keys = e.keys;
}

namespace {

SnapshotEntry EntryOf(const BlockInfo& info, const IndexKeys& keys, BlockDigest digest,
                      const struct stat& st) {
  SnapshotEntry e;
  e.block = ParseBlockName(info.address.block).value_or(BlockDigest{});
  e.size = info.size;
  e.commit_epoch = info.commit_epoch;
  e.region_id = info.region_id;
  e.uid = info.owner.uid;
  e.gid = info.owner.gid;
  e.commit_time_ns = info.commit_time_ns;
  e.digest = digest;
  e.keys = keys;
  e.inode = st.st_ino;
  e.file_size = static_cast<uint64_t>(st.st_size);
  e.ctime_sec = st.st_ctim.tv_sec;
  e.ctime_nsec = st.st_ctim.tv_nsec;
  return e;
}

}  // namespace

SnapshotEntry FileMedium::EntryOfBlock(const BlockInfo& info, int dir_fd, const std::string& name) {
  struct stat st {};
  ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
  std::string_view digest(info.checksum);
  if (digest.starts_with("xxh3-128:")) digest.remove_prefix(9);
  return EntryOf(info, IndexKeysOf(info.identity, info.canonical_identity),
                 ParseBlockName(digest).value_or(BlockDigest{}), st);
}

void FileMedium::NoteLoaded(uint32_t ns, const SnapshotEntry& e, bool from_snapshot) {
  if (!from_snapshot) index_current_ = false;
  SnapshotEntry& noted = loaded_.entries.emplace_back(e);
  noted.ns = ns;
}

// After a device loaded: what it verified becomes its INDEX (unless INDEX already says exactly
// that), and the journal starts empty.
void FileMedium::StartJournal(size_t dev) {
  if (loaded_.entries.size() != snapshot_.size()) index_current_ = false;
  if (!index_current_) {
    WriteReplacing(devices_[dev].dir.File(kSnapshotFile), EncodeSnapshot(loaded_));
  }
  loaded_ = IndexSnapshot{};
  EmptyJournal(dev);
}

void FileMedium::EmptyJournal(size_t dev) {
  JournalFile& j = *journals_[dev];
  std::lock_guard lock(j.mu);
  std::string path = devices_[dev].dir.File(kJournalFile);
  j.fd = Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
  j.bytes = 0;
  ::unlink((devices_[dev].dir.File(kOldJournalFile)).c_str());
}

void FileMedium::Append(size_t dev, const JournalRecord& record) {
  JournalFile& j = *journals_[dev];
  Bytes bytes = EncodeJournalRecord(record);
  bool rotate;
  {
    std::lock_guard lock(j.mu);
    if (!j.fd.valid()) return;  // not started (loading) or could not be opened: INDEX is checked anyway
    // One write per record, O_APPEND: a crash leaves whole records and at most one torn one.
    if (PwriteFull(j.fd.get(), bytes, 0) != StatusCode::kOk) CountError();
    j.bytes += bytes.size();
    rotate = j.bytes > kJournalRotateBytes;
    if (rotate) {
      // From here on, appends go to a fresh JOURNAL; JOURNAL.old is replayed before it at a
      // start until the INDEX below replaces both.
      std::string dir = devices_[dev].dir.root() + "/";
      ::rename((dir + kJournalFile).c_str(), (dir + kOldJournalFile).c_str());
      j.fd = Fd(::open((dir + kJournalFile).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
      j.bytes = 0;
    }
  }
  if (rotate) {
    SaveSnapshot(dev);  // on this thread: about a second per million blocks, once per 64 MiB
    ::unlink((devices_[dev].dir.File(kOldJournalFile)).c_str());
  }
}

void FileMedium::JournalCommit(size_t dev, int fd, const BlockInfo& draft,
                               const PayloadChecksums& sums) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;  // without it the entry would never match: leave it out
  JournalRecord r;
  r.ns = draft.address.tenant + "/" + draft.address.ns;
  r.entry = EntryOf(draft, IndexKeysOf(draft.identity, draft.canonical_identity),
                    ParseBlockName(sums.digest_hex).value_or(BlockDigest{}), st);
  Append(dev, r);
}

void FileMedium::JournalRemoval(size_t dev, const BlockAddress& address) {
  JournalRecord r;
  r.removal = true;
  r.ns = address.tenant + "/" + address.ns;
  r.entry.block = ParseBlockName(address.block).value_or(BlockDigest{});
  Append(dev, r);
}

void FileMedium::SaveSnapshots() {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (!Isolated(dev)) SaveSnapshot(dev);
  }
}

void FileMedium::SaveSnapshot(size_t dev) {
  IndexSnapshot snapshot;
  std::map<std::string, uint32_t> ns_index;
  // Under the store's lock: no I/O here; the files are checked below.
  std::string ns_name;
  host().ForEachBlock([&](const IndexedBlock& b, const StoredPayload* stored) {
    if (DeviceOf(stored) != dev) return;
    ns_name.assign(b.address.tenant).append("/").append(b.address.ns);
    auto [ns, added] = ns_index.try_emplace(ns_name, static_cast<uint32_t>(snapshot.namespaces.size()));
    if (added) snapshot.namespaces.push_back(ns_name);
    SnapshotEntry& e = snapshot.entries.emplace_back();
    e.ns = ns->second;
    e.block = ParseBlockName(b.address.block).value_or(BlockDigest{});
    e.size = b.size;
    e.commit_epoch = b.commit_epoch;
    e.region_id = b.region_id;
    e.uid = b.owner.uid;
    e.gid = b.owner.gid;
    e.commit_time_ns = b.commit_time_ns;
    e.digest = b.checksum;
    e.keys = b.keys;
  });
  std::string base = devices_[dev].dir.root() + "/blocks/", path;
  size_t kept = 0;
  for (SnapshotEntry& e : snapshot.entries) {
    struct stat st {};
    path.assign(base).append(snapshot.namespaces[e.ns]).append("/").append(FormatBlockName(e.block));
    if (::lstat(path.c_str(), &st) != 0) continue;
    e.inode = st.st_ino;
    e.file_size = static_cast<uint64_t>(st.st_size);
    e.ctime_sec = st.st_ctim.tv_sec;
    e.ctime_nsec = st.st_ctim.tv_nsec;
    snapshot.entries[kept++] = e;
  }
  snapshot.entries.resize(kept);
  WriteReplacing(devices_[dev].dir.File(kSnapshotFile), EncodeSnapshot(snapshot));
}

// Quarantined bytes stay quarantined across a restart: only a reclaim frees them.

}  // namespace gpucache
