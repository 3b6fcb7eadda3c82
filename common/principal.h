// Principal: the caller a request runs as, one type from the FUSE request to the cold tier.
//
// fs/ builds it from the request (uid, gid, and a way to read the supplementary groups) and
// decides access with it against the configuration (fs/access.h). A module fs/ does not
// include (the cold tier, through a control extension) gets it established: `admin` and
// `tenants` filled in by AccessPolicy::Establish, and the groups reader dropped, because it
// reads the FUSE request, which is gone once the reply is sent (an asynchronous refill
// outlives it). cold/ authorizes by `admin` and `tenants` only.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace gpucache {

struct Principal {
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Supplementary groups, fetched only when uid and primary gid did not decide (it costs a read
  // of /proc). May be empty; empty once established.
  std::function<std::vector<uint32_t>()> supplementary_groups;
  // Established by fs/ (AccessPolicy::Establish); false and empty until then.
  bool admin = false;                 // may act for every tenant and send admin requests
  std::set<std::string> tenants;      // the configured tenants it is a member of
  // The calling thread (the kernel's pid of the task that made the request, a thread id); 0 when
  // not known. A commit frame belongs to the thread that wrote its header (adr/0022).
  uint32_t thread = 0;

  // Whether it may act for `tenant` (established principals only).
  bool MayActFor(const std::string& tenant) const { return admin || tenants.count(tenant) > 0; }

  // The same caller with its supplementary groups read now, for a request answered after the
  // FUSE request that carried it was (a control request answered on read: its write was
  // answered first, which freed the request the groups reader reads).
  Principal Detached() const {
    Principal p = *this;
    if (supplementary_groups) p.supplementary_groups = [groups = supplementary_groups()] { return groups; };
    return p;
  }
};

}  // namespace gpucache
