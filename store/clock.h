// The wall clock as the store counts commit times, leases and fill outcomes (CLOCK_REALTIME,
// ns), and the filesystem its timestamps.
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
