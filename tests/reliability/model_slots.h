// The model tester's state (model_test.cc): what the product has promised about each slot —
// a block identity, its committed bytes, its pin, and the fill in progress on its .part.
#pragma once

#include <optional>
#include <string>

#include "tests/reliability/reliability_helpers.h"

namespace gpucache::test {

constexpr int kSlots = 24;  // pairs: slot 2i is 8 units, slot 2i+1 the same prefix at 16 units

inline CacheIdentity SlotId(int k) {
  CacheIdentity id = SampleIdentity("acme", k % 2 == 0 ? 8 : 16);
  id.chain[0] = RelBlock(static_cast<uint64_t>(k / 2) + 77).chain[0];
  return id;
}

struct Part {
  int fd = -1;       // an open writer, or -1
  Bytes data;        // what the reservation holds
  int identity = 0;  // 0 unset, 1 right, 2 wrong (another slot's)
  bool append = false;  // the open writer was opened with O_APPEND: writes land at the end
  bool fenced = false;
};

struct Slot {
  CacheIdentity id;
  std::string path, part_path;
  std::optional<Bytes> committed;
  bool pinned = false;
  bool read = false;     // pages may be in the kernel's cache since the last restart
  bool corrupt = false;  // a payload byte was damaged on disk, not yet found
  std::optional<Part> part;
  bool fence_blocked = false;  // a fill of it was fenced: its .part name answers ESTALE
  std::string fill;            // outcome of its latest fill (user.gpucache.fill.<block>), or ""
};

}  // namespace gpucache::test
