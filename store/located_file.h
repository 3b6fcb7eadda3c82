// FileMedium's state of a committed block: which data directory holds it. Shared by the
// FileMedium sources and its loader (file_store*.cc, file_loader*.cc); not part of the store's API.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "store/env.h"
#include "store/index_snapshot.h"
#include "store/indexed_store.h"

namespace gpucache {

class Located final : public StoredPayload {
 public:
  explicit Located(size_t d) : dev(d) {}
  const size_t dev;
};

// A block moved out of the namespace into quarantine/ (path empty: unlinked instead, when the
// move failed; nothing is left to remove). When the unlink failed too, `path` is the block's
// live name and `live_inode` the inode the block had under it (0: unknown): reclaim removes
// the name only while it still holds that inode, not a block committed there since.
class QuarantinedFile final : public StoredPayload {
 public:
  explicit QuarantinedFile(std::string p, bool live_name = false, uint64_t inode = 0)
      : path(std::move(p)), kept_live_name(live_name), live_inode(inode) {}
  std::string path;
  bool kept_live_name = false;
  uint64_t live_inode = 0;
};

inline size_t DeviceOf(const StoredPayload* stored) {
  auto* l = dynamic_cast<const Located*>(stored);
  return l ? l->dev : 0;
}
inline size_t DeviceOf(const std::shared_ptr<StoredPayload>& stored) {
  return DeviceOf(stored.get());
}

}  // namespace gpucache
