// The lifecycle of a block, as one table.
//
//   ABSENT -> RESERVED -> WRITING -> COMMITTED -> EVICTING -> ABSENT
//                |           |-> ABSENT (abandoned, fenced)    \-> QUARANTINED -> ABSENT
//                |           \-> QUARANTINED -> ABSENT (completion unknown)
//                \-> ABSENT (nothing was written)
//
// RESERVED: `<block>.part` was created exclusively (the single-flight point).
// WRITING: the first byte arrived. COMMITTED: rename published it; the only readable state,
// and only while its checksums match. EVICTING: leaving the namespace. QUARANTINED: bytes
// may still be in use (an open handle at eviction, an I/O whose completion never came); only
// a drained attestation or fence + reclaim frees it, never a timeout.
//
// Every state change in the store goes through Transition(); an edge not in the table is a
// bug, not a runtime condition: it is refused (the state stays) and counted, and the store's
// tests check that the count stays zero.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpucache {

enum class BlockState : uint8_t {
  kAbsent = 0,
  kReserved,
  kWriting,
  kCommitted,
  kEvicting,
  kQuarantined,
};

inline constexpr BlockState kAllBlockStates[] = {
    BlockState::kAbsent,    BlockState::kReserved, BlockState::kWriting,
    BlockState::kCommitted, BlockState::kEvicting, BlockState::kQuarantined,
};

bool CanTransition(BlockState from, BlockState to);
// Moves `state` to `to` if the table has that edge; otherwise leaves it, counts the refusal
// and returns false. For a caller whose next step depends on it.
[[nodiscard]] bool Transition(BlockState& state, BlockState to);
// Transition where the caller's own checks make the edge certain: a refusal is a bug, counted
// as any refusal and stopping a debug build (the sanitizer builds) at the call that made it.
void MustTransition(BlockState& state, BlockState to);
// Refused moves since the process started (each one a bug).
uint64_t RefusedTransitions();
std::string_view ToString(BlockState state);  // "COMMITTED", ...

}  // namespace gpucache
