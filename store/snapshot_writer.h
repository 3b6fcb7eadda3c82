// SnapshotWriter: the IndexWriter FileMedium hands the store (store/medium.h) when it saves
// INDEX: at a clean close and when a journal is folded. One snapshot per device that is due,
// filled by Add under the store's lock (no I/O: each block goes to its device's snapshot) and
// written by Write to that device's IndexLog (store/index_log.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "store/index_log.h"
#include "store/index_snapshot.h"
#include "store/medium.h"

namespace gpucache {

class SnapshotWriter final : public IndexWriter {
 public:
  // `logs`: every device's IndexLog, by device; `due`: the devices whose INDEX is written;
  // `after`: what the medium does once they are (end a rotation, empty the journals), told
  // which of the due devices' INDEX was written (a failed one keeps its journals).
  using After = std::function<void(const std::vector<size_t>& written)>;
  SnapshotWriter(const std::vector<std::unique_ptr<IndexLog>>& logs, const std::vector<size_t>& due,
                 After after);
  void Add(const IndexedBlock& block, const StoredPayload* stored) override;
  void Write() override;

 private:
  struct Device {
    IndexLog* log = nullptr;  // null: not due, its blocks are not kept
    IndexSnapshot snapshot;
    std::map<std::string, uint32_t> ns_index;  // "tenant/ns" -> its place in snapshot.namespaces
  };
  std::vector<Device> devices_;
  After after_;
  std::string ns_name_;  // reused by Add
};

}  // namespace gpucache
