// What the medium and the store exchange about a committed block (store/medium.h).
#include "store/medium.h"

namespace gpucache {

BlockInfo BlockInfoOf(IndexedBlock block) {
  BlockInfo info;
  static_cast<IndexedBlock&>(info) = std::move(block);
  return info;
}

}  // namespace gpucache
