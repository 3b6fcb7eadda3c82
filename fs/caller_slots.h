// CallerSlots: how many requests of each uid hold one of the daemon's threads right now, with
// a cap per uid, so one tenant's slow requests cannot take every FUSE thread (issue 29).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "store/mutex.h"

namespace gpucache {

class CallerSlots {
 public:
  // At most `per_caller` slots a uid, and `in_all` for every uid together (several uids, each
  // within its own cap, could otherwise take every thread between them).
  CallerSlots(int per_caller, int in_all) : per_caller_(per_caller), in_all_(in_all) {}
  // Takes a slot of `uid`; false when it holds `per_caller` already, or all uids `in_all`.
  bool TryTake(uint32_t uid) {
    MutexLock lock(mu_);
    if (total_ >= in_all_) return false;
    int& held = held_[uid];
    if (held >= per_caller_) {
      if (held == 0) held_.erase(uid);
      return false;
    }
    ++held;
    ++total_;
    return true;
  }
  void Give(uint32_t uid) {
    MutexLock lock(mu_);
    auto it = held_.find(uid);
    if (it == held_.end()) return;
    --total_;
    if (--it->second <= 0) held_.erase(it);
  }

 private:
  const int per_caller_, in_all_;
  Mutex mu_;
  std::map<uint32_t, int> held_ GUARDED_BY(mu_);  // only uids holding a slot
  int total_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpucache
