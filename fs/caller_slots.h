// CallerSlots: how many requests of each uid hold one of the daemon's threads right now, with
// a cap per uid, so one tenant's slow requests cannot take every FUSE thread (issue 29).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>

#include "fs/byte_budget.h"

namespace gpucache {

class CallerSlots {
 public:
  // At most `per_caller` slots a uid, and `in_all` for every uid together (several uids, each
  // within its own cap, could otherwise take every thread between them).
  CallerSlots(int per_caller, int in_all) : slots_(per_caller, in_all) {}
  // Takes a slot of `uid`; false when it holds `per_caller` already, or all uids `in_all`.
  bool TryTake(uint32_t uid) { return slots_.TryTake(uid, 1); }
  void Give(uint32_t uid) { slots_.Give(uid, 1); }

 private:
  ByteBudget slots_;  // one unit a slot
};

}  // namespace gpucache
