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
#include "store/identity.h"

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

// The identity the replay gives block i of `r` in the store (one per trace block id): chain =
// [parent's hash, own hash], so that the store sees the trace's parent links; tenant "replay".
CacheIdentity ReplayIdentity(const Request& r, size_t i);
// The key the store counts that block by (PolicyKeyOf its address), so that a policy sees the
// same keys in process as through a mount.
PolicyKey ReplayKey(const Request& r, size_t i);
// ReplayKey of every block of every request, computed once per block id.
std::vector<std::vector<PolicyKey>> ReplayKeys(const std::vector<Request>& trace);

struct Score {
  uint64_t hit_tokens = 0;
  uint64_t input_tokens = 0;
  double ratio() const { return input_tokens ? double(hit_tokens) / double(input_tokens) : 0; }
};

// `keys`: ReplayKeys(trace), or null to compute them here.
Score ReplayPolicy(const std::vector<Request>& trace, EvictionPolicy& policy, uint64_t capacity,
                   const std::vector<std::vector<PolicyKey>>* keys = nullptr);
// Belady's offline optimum on block accesses: evict the block whose next use is farthest
// (or do not insert a block used later than everything resident).
Score ReplayBelady(const std::vector<Request>& trace, uint64_t capacity);
// A time-aware bound: what any cache of `capacity` blocks could serve if it could spend its
// capacity x (the trace's duration) block-milliseconds on whichever reuses it liked. A hit
// needs its block resident from the block's previous use to this one (a block only comes in
// when a request brings it), and a cache never holds more than `capacity` blocks at once, so
// the reuse intervals of any policy's hits fit in that budget; the bound takes the reuses of
// the infinite cache's leading runs, cheapest per token first (the last one in part). It
// weighs a block by the wall-clock time it must be kept rather than by the accesses between
// its uses, as Belady does, so it says how far the trace's timing, not only its order, lets a
// cache of this size go; it is at least Belady's ratio and at most the infinite cache's.
Score ReplayTimeBound(const std::vector<Request>& trace, uint64_t capacity);

}  // namespace gpucache::replay
