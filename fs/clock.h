// The wall clock as the store's leases and fill outcomes count it (CLOCK_REALTIME, ns).
#pragma once

#include <time.h>

#include <cstdint>

namespace gpucache {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace gpucache
