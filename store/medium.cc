// What the medium and the store exchange about a committed block (store/medium.h).
#include "store/medium.h"

namespace gpucache {

IndexedBlock IndexedBlockOf(const BlockInfo& draft, const IndexKeys& keys) {
  return IndexedBlock{.address = draft.address,
                      .size = draft.size,
                      .commit_epoch = draft.commit_epoch,
                      .region_id = draft.region_id,
                      .owner = draft.owner,
                      .commit_time_ns = draft.commit_time_ns,
                      .keys = keys,
                      .pinned = draft.pinned};
}

BlockInfo BlockInfoOf(IndexedBlock block) {
  BlockInfo info;
  info.address = std::move(block.address);
  info.size = block.size;
  info.commit_epoch = block.commit_epoch;
  info.region_id = block.region_id;
  info.owner = block.owner;
  info.commit_time_ns = block.commit_time_ns;
  info.pinned = block.pinned;
  return info;
}

IndexedBlock IndexedBlockOf(const BlockInfo& info) {
  return IndexedBlockOf(info, IndexKeysOf(info.identity, info.canonical_identity));
}

}  // namespace gpucache
