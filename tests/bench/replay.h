// Trace replay for eviction policies (Mooncake trace format, docs/eviction.md).
//
// A request's hit is the leading run of its hash_ids present in the cache when it arrives;
// every block of the request is then accessed in order, and missing ones are inserted,
// evicting by the policy when the cache is full. The score is the prefix-token hit ratio:
// tokens served from cache over input tokens (512 tokens per block, the last one partial).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/eviction/eviction_policy.h"

namespace gpucache::replay {

inline constexpr uint32_t kTokensPerBlock = 512;

struct Request {
  uint64_t timestamp_ms = 0;
  uint32_t input_length = 0;
  std::vector<uint64_t> blocks;  // hash_ids
};

// Parses a JSONL trace; throws std::runtime_error naming the line on bad input.
std::vector<Request> LoadTrace(const std::string& path, size_t limit = 0);
uint64_t UniqueBlocks(const std::vector<Request>& trace);
uint32_t TokensInBlock(const Request& r, size_t i);

struct Score {
  uint64_t hit_tokens = 0;
  uint64_t input_tokens = 0;
  double ratio() const { return input_tokens ? double(hit_tokens) / double(input_tokens) : 0; }
};

Score ReplayPolicy(const std::vector<Request>& trace, EvictionPolicy& policy, uint64_t capacity);
// Belady's offline optimum on block accesses: evict the block whose next use is farthest
// (or do not insert a block used later than everything resident).
Score ReplayBelady(const std::vector<Request>& trace, uint64_t capacity);

}  // namespace gpucache::replay
