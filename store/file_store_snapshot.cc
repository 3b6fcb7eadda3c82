// FileMedium: what goes into the index snapshot (INDEX), read at start and written at a clean
// close (store/index_snapshot.h for the format and the trust rules; the files are the device's
// IndexLog, store/index_log.h); the journal over it is in file_store_journal.cc.
#include <algorithm>
#include <map>
#include <tuple>

#include "store/env.h"
#include "store/file_store.h"
#include "store/file_store_located.h"

namespace gpucache {

void FileMedium::LoadSnapshot(size_t dev) {
  IndexSnapshot snapshot;
  index_current_ = false;
  if (std::optional<IndexSnapshot> decoded = logs_[dev]->ReadIndex()) {
    snapshot = std::move(*decoded);
    index_current_ = true;
  }
  index_whole_ = index_current_;
  // What happened since INDEX was written (a crash left it; a rotation may have left two).
  JournalReplay replay(snapshot);
  old_journal_ = logs_[dev]->ReplayJournal(replay, /*old=*/true);
  journal_ = logs_[dev]->ReplayJournal(replay, /*old=*/false);
  if (replay.records() != 0) index_current_ = false;
  snapshot_table_ = replay.Finish();
  for (uint32_t i = 0; i < snapshot.namespaces.size(); ++i) {
    snapshot_namespaces_.emplace(std::move(snapshot.namespaces[i]), i);
  }
  ns_of_snapshot_.assign(snapshot.namespaces.size(), 0);
  snapshot_ = std::move(snapshot.entries);
  used_.reserve(snapshot_table_.live());
  found_.emplace_back().expected_blocks = snapshot_table_.live();
}

const SnapshotEntry* FileMedium::FromSnapshot(int dir_fd, const std::string& path, int64_t ns,
                                              const std::string& name,
                                              const Result<FileStat>* taken) {
  if (ns < 0) return nullptr;
  std::optional<BlockDigest> block = ParseBlockName(name);
  if (!block) return nullptr;
  uint32_t index = snapshot_table_.Find(snapshot_, static_cast<uint32_t>(ns), *block);
  if (index == EntryTable::kNone) return nullptr;
  const SnapshotEntry& e = snapshot_[index];
  Result<FileStat> st = taken ? *taken : dir_fd >= 0 ? env_.StatAt(dir_fd, name) : env_.StatAt(-1, path);
  if (!st.ok() || !st->regular || st->inode != e.inode || st->size != e.file_size ||
      st->ctime_sec != e.ctime_sec || st->ctime_nsec != e.ctime_nsec) {
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
  b.keys = e.keys;
}

SnapshotEntry EntryOf(const BlockInfo& info, const IndexKeys& keys, BlockDigest digest,
                      const FileStat& st) {
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
  e.inode = st.inode;
  e.file_size = st.size;
  e.ctime_sec = st.ctime_sec;
  e.ctime_nsec = st.ctime_nsec;
  return e;
}

std::optional<SnapshotEntry> FileMedium::EntryOfBlock(const BlockInfo& info, int dir_fd,
                                                      const std::string& name) {
  Result<FileStat> st = env_.StatAt(dir_fd, name);
  if (!st.ok()) return std::nullopt;
  std::string_view digest(info.checksum);
  if (digest.starts_with("xxh3-128:")) digest.remove_prefix(9);
  return EntryOf(info, IndexKeysOf(info.identity, info.canonical_identity),
                 ParseBlockName(digest).value_or(BlockDigest{}), st.value());
}

void FileMedium::NoteLoaded(uint32_t ns, const SnapshotEntry& e, bool from_snapshot) {
  if (from_snapshot) {
    used_.push_back(static_cast<uint32_t>(&e - snapshot_.data()));
    return;
  }
  index_current_ = false;
  SnapshotEntry& noted = loaded_.entries.emplace_back(e);
  noted.ns = ns;
}

IndexSnapshot FileMedium::Verified() const {
  IndexSnapshot out;
  out.namespaces = loaded_.namespaces;
  out.entries.reserve(used_.size() + loaded_.entries.size());
  for (uint32_t i : used_) {
    SnapshotEntry& e = out.entries.emplace_back(snapshot_[i]);
    e.ns = ns_of_snapshot_[e.ns];
  }
  out.entries.insert(out.entries.end(), loaded_.entries.begin(), loaded_.entries.end());
  return out;
}

void FileMedium::SaveSnapshots(const BlockLister& blocks) {
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (!devices_.Isolated(dev)) SaveSnapshot(dev, blocks);
  }
}

void FileMedium::SaveSnapshot(size_t dev, const BlockLister& blocks) {
  IndexSnapshot snapshot;
  std::map<std::string, uint32_t> ns_index;
  // Under the store's lock: no I/O here.
  std::string ns_name;
  blocks([&](const IndexedBlock& b, const StoredPayload* stored) {
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
    e.keys = b.keys;  // the index keeps neither the payload digest nor keys.identity: zeros
  });
  logs_[dev]->StampAndWrite(std::move(snapshot));  // the files are checked there
}

// Quarantined bytes stay quarantined across a restart: only a reclaim frees them.

}  // namespace gpucache
