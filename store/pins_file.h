// PINS: the pinned blocks a start applies (docs/operations.md, "Pins"). Each data directory's
// PINS names the pinned blocks stored in that directory, and a start takes the union: a write
// that fails on one directory (a full or failing device) then only keeps that directory's
// last saved pins, and an isolated directory's pins come back with it. Each pin names the
// commit it was made on: an entry left by a write that failed must not pin another block
// committed at the same path later.
//
//   gpucache-pins 2
//   <tenant>/<namespace>/<block> <commit_time_ns>
//
// The first format (every pin in every directory, a relative path per line, no header) still
// reads: each path pinned whatever its commit.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "store/block_store.h"

namespace gpucache {

class StoredPayload;  // store/medium.h

struct PinnedBlock {
  BlockAddress address;
  uint64_t commit_time_ns = 0;
  std::shared_ptr<StoredPayload> stored;  // where the medium keeps it (its data directory)
};

class PinsFile {
 public:
  static std::string Encode(const std::vector<const PinnedBlock*>& pinned);
  // Malformed lines are skipped: a damaged PINS costs its pins, never a block.
  static PinsFile Decode(std::string_view text);

  // Adds the pins of another data directory's PINS.
  void Merge(PinsFile other) { pins_.merge(other.pins_); }
  bool empty() const { return pins_.empty(); }
  // Whether the block at `relative` committed at `commit_time_ns` is pinned.
  bool Pinned(const std::string& relative, uint64_t commit_time_ns) const;

 private:
  static constexpr uint64_t kAnyCommit = 0;  // an entry of the first format
  std::multimap<std::string, uint64_t, std::less<>> pins_;  // relative path -> its commit
};

}  // namespace gpucache
