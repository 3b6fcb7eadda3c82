// PINS: the pinned blocks a start applies (docs/operations.md, "Pins"). Written whole to every
// data directory on each change; a write can fail on one directory and not another (a full or
// failing device), so each copy carries a generation and a start takes the newest copy, not
// the union (a union brought back an unpin that one directory missed). Each pin names the
// commit it was made on: an entry left by a write that failed must not pin another block
// committed at the same path later.
//
//   gpucache-pins 2 <generation>
//   <tenant>/<namespace>/<block> <commit_time_ns>
//
// The first format, a relative path per line and no header, still reads: generation 0, each
// path pinned whatever its commit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "store/block_store.h"

namespace gpucache {

struct PinnedBlock {
  BlockAddress address;
  uint64_t commit_time_ns = 0;
};

class PinsFile {
 public:
  static std::string Encode(uint64_t generation, const std::vector<PinnedBlock>& pinned);
  // Malformed lines are skipped: a damaged PINS costs its pins, never a block.
  static PinsFile Decode(std::string_view text);

  // Of the copies in several data directories: the newer generation; both if equal.
  void TakeNewer(PinsFile other);
  uint64_t generation() const { return generation_; }
  bool empty() const { return pins_.empty(); }
  // Whether the block at `relative` committed at `commit_time_ns` is pinned.
  bool Pinned(const std::string& relative, uint64_t commit_time_ns) const;

 private:
  static constexpr uint64_t kAnyCommit = 0;  // an entry of the first format
  uint64_t generation_ = 0;
  std::multimap<std::string, uint64_t, std::less<>> pins_;  // relative path -> its commit
};

}  // namespace gpucache
