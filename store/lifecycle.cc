#include "store/lifecycle.h"

#include <atomic>
#include <cassert>

namespace gpucache {
namespace {

struct Edge {
  BlockState from, to;
};

// The whole lifecycle. Keep in step with the diagram in lifecycle.h and docs/architecture.md.
constexpr Edge kEdges[] = {
    {BlockState::kAbsent, BlockState::kReserved},        // exclusive create of <block>.part
    {BlockState::kReserved, BlockState::kWriting},       // first write
    {BlockState::kReserved, BlockState::kAbsent},        // abandoned before any write
    {BlockState::kWriting, BlockState::kCommitted},      // rename published the block
    {BlockState::kWriting, BlockState::kAbsent},         // abandoned, fenced, failed commit
    {BlockState::kWriting, BlockState::kQuarantined},    // I/O completion unknown
    {BlockState::kCommitted, BlockState::kEvicting},     // eviction, invalidation, corruption
    {BlockState::kEvicting, BlockState::kAbsent},        // nobody can still see the bytes
    {BlockState::kEvicting, BlockState::kQuarantined},   // a handle or mapping is still open
    {BlockState::kQuarantined, BlockState::kAbsent},     // drained attestation or fenced reclaim
};

std::atomic<uint64_t> refused{0};

}  // namespace

bool CanTransition(BlockState from, BlockState to) {
  for (const Edge& e : kEdges) {
    if (e.from == from && e.to == to) return true;
  }
  return false;
}

bool Transition(BlockState& state, BlockState to) {
  if (!CanTransition(state, to)) {
    refused.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  state = to;
  return true;
}

void MustTransition(BlockState& state, BlockState to) {
  [[maybe_unused]] bool moved = Transition(state, to);
  assert(moved && "a lifecycle move the table refuses");
}

uint64_t RefusedTransitions() { return refused.load(std::memory_order_relaxed); }

std::string_view ToString(BlockState state) {
  switch (state) {
    case BlockState::kAbsent: return "ABSENT";
    case BlockState::kReserved: return "RESERVED";
    case BlockState::kWriting: return "WRITING";
    case BlockState::kCommitted: return "COMMITTED";
    case BlockState::kEvicting: return "EVICTING";
    case BlockState::kQuarantined: return "QUARANTINED";
  }
  return "UNKNOWN";
}

}  // namespace gpucache
