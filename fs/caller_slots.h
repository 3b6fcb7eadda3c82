// CallerSlots: how many requests of each uid hold one of the daemon's threads (or a place among
// the requests waiting for their reads) right now, with a cap per uid, one per tenant and one
// for all, so one tenant's slow requests cannot take every FUSE thread (issue 29), however many
// uids it has.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "fs/byte_budget.h"
#include "store/mutex.h"

namespace gpucache {

class CallerSlots {
 public:
  // At most `per_caller` slots a uid, `per_tenant` for the uids of one tenant together (a tenant
  // given by gid may have any number of uids), and `in_all` for every uid together (several
  // uids, each within its own cap, could otherwise take every thread between them).
  CallerSlots(int per_caller, int in_all, int per_tenant)
      : slots_(per_caller, in_all), per_tenant_(per_tenant) {}
  CallerSlots(int per_caller, int in_all) : CallerSlots(per_caller, in_all, in_all) {}
  // Takes a slot of `uid`, charged to each of `tenants` (the caller's); false when it holds
  // `per_caller` already, any of the tenants `per_tenant`, or all uids `in_all`.
  bool TryTake(uint32_t uid, const std::set<std::string>& tenants = {}) {
    MutexLock lock(mu_);
    for (const std::string& t : tenants) {
      if (auto it = held_.find(t); it != held_.end() && it->second >= per_tenant_) return false;
    }
    if (!slots_.TryTake(uid, 1)) return false;
    for (const std::string& t : tenants) held_[t]++;
    return true;
  }
  // Gives back a slot taken with the same `uid` and `tenants`.
  void Give(uint32_t uid, const std::set<std::string>& tenants = {}) {
    MutexLock lock(mu_);
    slots_.Give(uid, 1);
    for (const std::string& t : tenants) {
      auto it = held_.find(t);
      if (it != held_.end() && --it->second == 0) held_.erase(it);
    }
  }

 private:
  ByteBudget slots_;  // one unit a slot
  const int per_tenant_;
  Mutex mu_;
  std::map<std::string, int> held_ GUARDED_BY(mu_);  // only tenants holding slots
};

}  // namespace gpucache
