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
  explicit CallerSlots(int per_caller) : per_caller_(per_caller) {}
  // Takes a slot of `uid`; false when it holds `per_caller` already.
  bool TryTake(uint32_t uid) {
    MutexLock lock(mu_);
    int& held = held_[uid];
    if (held >= per_caller_) return false;
    ++held;
    return true;
  }
  void Give(uint32_t uid) {
    MutexLock lock(mu_);
    auto it = held_.find(uid);
    if (it != held_.end() && --it->second <= 0) held_.erase(it);
  }

 private:
  const int per_caller_;
  Mutex mu_;
  std::map<uint32_t, int> held_ GUARDED_BY(mu_);  // only uids holding a slot
};

}  // namespace gpucache
