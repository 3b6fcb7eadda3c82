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

void FileMedium::LoadSnapshot(size_t dev) {
  std::string path = devices_[dev].path + "/" + kSnapshotFile;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) return;
  Bytes bytes(static_cast<size_t>(st.st_size));
  StatusCode read = PreadFull(fd.get(), bytes, 0);
  fd.Reset();
  // Used once: whatever happens during this run, the next start scans unless this one closes
  // cleanly and writes a new snapshot.
  ::unlink(path.c_str());
  if (read != StatusCode::kOk) return;
  std::optional<IndexSnapshot> snapshot = DecodeSnapshot(bytes);
  if (!snapshot) return;
  for (uint32_t i = 0; i < snapshot->namespaces.size(); ++i) {
    snapshot_namespaces_.emplace(std::move(snapshot->namespaces[i]), i);
  }
  snapshot_ = std::move(snapshot->entries);
  std::sort(snapshot_.begin(), snapshot_.end(), [](const SnapshotEntry& a, const SnapshotEntry& b) {
    return std::tie(a.ns, a.block) < std::tie(b.ns, b.block);
  });
  host().ReserveBlocks(snapshot_.size());
}

std::optional<IndexedBlock> FileMedium::FromSnapshot(int dir_fd, const std::string& path,
                                                                  int64_t ns, const std::string& name) {
  if (ns < 0) return std::nullopt;
  std::optional<BlockDigest> block = ParseBlockName(name);
  if (!block) return std::nullopt;
  auto it = std::lower_bound(snapshot_.begin(), snapshot_.end(), std::pair(ns, *block),
                             [](const SnapshotEntry& e, const std::pair<int64_t, BlockDigest>& key) {
                               return std::tie(e.ns, e.block) < std::tie(key.first, key.second);
                             });
  if (it == snapshot_.end() || it->ns != ns || it->block != *block) return std::nullopt;
  const SnapshotEntry& e = *it;
  struct stat st {};
  int got = dir_fd >= 0 ? ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW)
                        : ::lstat(path.c_str(), &st);
  if (got != 0 || !S_ISREG(st.st_mode) || st.st_ino != e.inode ||
      static_cast<uint64_t>(st.st_size) != e.file_size || st.st_ctim.tv_sec != e.ctime_sec ||
      st.st_ctim.tv_nsec != e.ctime_nsec) {
    return std::nullopt;  // not the file the snapshot saw: read it in full
  }
  IndexedBlock b;  // the caller sets the address
  b.size = e.size;
  b.commit_epoch = e.commit_epoch;
  b.region_id = e.region_id;
  b.owner = Owner{e.uid, e.gid};
  b.commit_time_ns = e.commit_time_ns;
  b.checksum = e.digest;
  b.keys = e.keys;
  return b;
}

void FileMedium::SaveSnapshots() {
  std::vector<IndexSnapshot> per_dev(devices_.size());
  std::vector<std::map<std::string, uint32_t>> ns_index(devices_.size());
  std::vector<bool> in_service(devices_.size());
  for (size_t dev = 0; dev < devices_.size(); ++dev) in_service[dev] = !Isolated(dev);
  // Under the store's lock: no I/O here; the files are checked below.
  std::string ns_name;
  host().ForEachBlock([&](const IndexedBlock& b, const StoredPayload* stored) {
    size_t dev = DeviceOf(stored);
    if (dev >= devices_.size() || !in_service[dev]) return;
    IndexSnapshot& snapshot = per_dev[dev];
    ns_name.assign(b.address.tenant).append("/").append(b.address.ns);
    auto [ns, added] = ns_index[dev].try_emplace(ns_name, static_cast<uint32_t>(snapshot.namespaces.size()));
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
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    if (!in_service[dev]) continue;
    IndexSnapshot& snapshot = per_dev[dev];
    std::string base = devices_[dev].path + "/blocks/", path;
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
    Bytes bytes = EncodeSnapshot(snapshot);
    WriteFileAtomically(devices_[dev].path + "/" + kSnapshotFile,
                        std::string(bytes.begin(), bytes.end()));
  }
}

// Quarantined bytes stay quarantined across a restart: only a reclaim frees them.

}  // namespace gpucache
