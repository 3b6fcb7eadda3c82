// ByteBudget: how much of something each uid holds, with a cap per uid and one for every uid
// together (CallerSlots counts threads with it). Here, mostly: how many bytes each uid's open
// handles hold of what the daemon generated for them at their open (a directory's listing, a `.gpucache` file's text), with a cap per uid and
// one for every uid together. Each open holds its copy until its release: without a bound one
// uid opening a large listing thousands of times took the daemon's memory (8 GB, found by
// review, 2026-12-07), and any uid can open `.gpucache/metrics`.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

#include "store/mutex.h"

namespace gpucache {

class ByteBudget {
 public:
  ByteBudget(uint64_t per_caller, uint64_t in_all) : per_caller_(per_caller), in_all_(in_all) {}
  // Charges `bytes` to `uid`; false (nothing charged) when that would take the uid past
  // `per_caller` or every uid past `in_all`.
  bool TryTake(uint32_t uid, uint64_t bytes) {
    MutexLock lock(mu_);
    uint64_t& held = held_[uid];
    if (bytes > per_caller_ - held || bytes > in_all_ - total_) {
      if (held == 0) held_.erase(uid);
      return false;
    }
    held += bytes;
    total_ += bytes;
    return true;
  }
  void Give(uint32_t uid, uint64_t bytes) {
    MutexLock lock(mu_);
    auto it = held_.find(uid);
    if (it == held_.end()) return;
    bytes = std::min(bytes, it->second);
    total_ -= bytes;
    if ((it->second -= bytes) == 0) held_.erase(it);
  }

 private:
  const uint64_t per_caller_, in_all_;
  Mutex mu_;
  std::map<uint32_t, uint64_t> held_ GUARDED_BY(mu_);  // only uids holding bytes
  uint64_t total_ GUARDED_BY(mu_) = 0;
};

}  // namespace gpucache
