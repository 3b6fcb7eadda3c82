// Replaying a trace through a real gpucachefs mount (gpucache-replay --mount).
#pragma once

#include <string>

#include "tests/bench/replay.h"

namespace gpucache::replay {

struct MountResult {
  bool ok = false;
  std::string error;
  Score score;
};

// Mounts a fresh gpucachefs (found beside `self_path`) at `mountpoint` with eviction policy
// `policy` and a tenant quota of capacity_blocks x block_bytes, replays `trace` with real files,
// unmounts, and removes the scratch data directory.
MountResult ReplayThroughMount(const std::vector<Request>& trace, const std::string& policy,
                               uint64_t capacity_blocks, uint64_t block_bytes,
                               const std::string& mountpoint, const std::string& self_path);

}  // namespace gpucache::replay
