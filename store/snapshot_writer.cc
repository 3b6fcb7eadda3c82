// SnapshotWriter: INDEX of the blocks the store lists, one per device that is due
// (store/index_snapshot.h for the format and the trust rules).
#include "store/snapshot_writer.h"

#include "store/located_file.h"
#include "store/index_entry.h"

namespace gpucache {

SnapshotWriter::SnapshotWriter(const std::vector<std::unique_ptr<IndexLog>>& logs,
                               const std::vector<size_t>& due, After after)
    : devices_(logs.size()), after_(std::move(after)) {
  for (size_t dev : due) devices_[dev].log = logs[dev].get();
}

void SnapshotWriter::Add(const IndexedBlock& b, const StoredPayload* stored) {
  size_t dev = DeviceOf(stored);
  if (dev >= devices_.size() || devices_[dev].log == nullptr) return;
  Device& d = devices_[dev];
  ns_name_.assign(b.address.tenant).append("/").append(b.address.ns);
  auto [ns, added] = d.ns_index.try_emplace(ns_name_, static_cast<uint32_t>(d.snapshot.namespaces.size()));
  if (added) d.snapshot.namespaces.push_back(ns_name_);
  // The index keeps neither the payload digest nor keys.identity: zeros.
  d.snapshot.entries.emplace_back(EntryOf(b)).ns = ns->second;
}

void SnapshotWriter::Write() {
  std::vector<size_t> written;
  for (size_t dev = 0; dev < devices_.size(); ++dev) {
    Device& d = devices_[dev];
    // The files are checked there.
    if (d.log != nullptr && d.log->StampAndWrite(std::move(d.snapshot))) written.push_back(dev);
  }
  if (after_) after_(written);
}

}  // namespace gpucache
