// FileMedium: the index snapshot (INDEX) written at a clean close and at a journal's fold
// (store/index_snapshot.h for the format and the trust rules; the files are the device's
// IndexLog, store/index_log.h; a start reads them in store/file_loader.cc).
#include <map>

#include "store/env.h"
#include "store/file_store.h"
#include "store/file_store_located.h"
#include "store/index_entry.h"

namespace gpucache {

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
    // The index keeps neither the payload digest nor keys.identity: zeros.
    snapshot.entries.emplace_back(EntryOf(b)).ns = ns->second;
  });
  logs_[dev]->StampAndWrite(std::move(snapshot));  // the files are checked there
}

}  // namespace gpucache
