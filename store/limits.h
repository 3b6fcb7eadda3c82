// ResourceLimits: what the store admits, globally and per tenant (0 means unlimited).
//
//   max_block_bytes        a block larger than this fails with kTooLarge (EFBIG)
//   max_inflight_requests  reservations (fills) in flight                 -> kExhausted (EAGAIN)
//   max_inflight_bytes     bytes written, or being written, to reservations not yet committed
//                          -> kExhausted (EAGAIN)
//   max_registrations      reservations + committed + quarantined blocks  -> kExhausted (EAGAIN)
//   max_open_files         one tenant's reservations + blocks open for reading, each of which
//                          holds one of the daemon's file descriptors; the global value applies
//                          to each tenant (not to all together), so that one tenant cannot take
//                          the daemon's descriptor table from every other  -> kExhausted (EAGAIN)
//   max_retained_bytes     committed + quarantined bytes: when a commit would pass it (with
//                          the commits sealing now) the store evicts; if nothing is evictable,
//                          kNoSpace (ENOSPC) for the global limit, kTenantQuota (EDQUOT) for a
//                          tenant's
//
// Admission refuses cleanly: a refused request changes nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace gpucache {

struct Limits {
  uint64_t max_block_bytes = 0;
  uint64_t max_inflight_requests = 0;
  uint64_t max_inflight_bytes = 0;
  uint64_t max_registrations = 0;
  uint64_t max_retained_bytes = 0;
  uint64_t max_open_files = 0;  // per tenant, even in ResourceLimits::global
};

struct ResourceLimits {
  Limits global{.max_block_bytes = 256ull << 20};
  std::map<std::string, Limits, std::less<>> tenants;  // tenants without an entry have no tenant limits
  // `tenants` lists every tenant of the configuration (ResourceLimitsOf): one without an entry
  // was removed from it, and its blocks (still on disk, still indexed) are nobody's to keep
  // (Retired). False: entries are only for tenants with limits (tests build them so).
  bool all_tenants_listed = false;
  bool Retired(std::string_view tenant) const { return all_tenants_listed && tenants.find(tenant) == tenants.end(); }

  const Limits& Tenant(const std::string& tenant) const {
    static const Limits kNone;
    auto it = tenants.find(tenant);
    return it == tenants.end() ? kNone : it->second;
  }
};

// What a tenant (or everyone) holds right now.
struct Usage {
  uint64_t reservations = 0;
  uint64_t open_readers = 0;  // blocks open for reading by clients (quarantined ones too)
  uint64_t inflight_bytes = 0;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint64_t quarantined_blocks = 0;
  uint64_t quarantined_bytes = 0;
  // Bytes of commits admitted under max_retained_bytes and sealing now, outside the store's
  // lock: retained in a moment, so every other commit's room counts them (not retained_bytes():
  // they are not on the books, in the metrics or evictable yet).
  uint64_t committing_bytes = 0;

  uint64_t registrations() const { return reservations + blocks + quarantined_blocks; }
  // What max_open_files counts: each holds a descriptor of the daemon's.
  uint64_t open_files() const { return reservations + open_readers; }
  uint64_t retained_bytes() const { return bytes + quarantined_bytes; }
  Usage& operator+=(const Usage& o) {
    reservations += o.reservations;
    open_readers += o.open_readers;
    inflight_bytes += o.inflight_bytes;
    blocks += o.blocks;
    bytes += o.bytes;
    quarantined_blocks += o.quarantined_blocks;
    quarantined_bytes += o.quarantined_bytes;
    committing_bytes += o.committing_bytes;
    return *this;
  }
};

// True when `value` stays within `limit` (0: unlimited).
inline bool Within(uint64_t value, uint64_t limit) { return limit == 0 || value <= limit; }

}  // namespace gpucache
