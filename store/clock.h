// The store's two clocks, in ns. NowNs: the wall clock (CLOCK_REALTIME) of commit times and
// of the times files show. LeaseNowNs: the clock of leases and fence windows (CLOCK_BOOTTIME),
// which no NTP step or settimeofday moves: on the wall clock a step back of hours kept a
// crashed writer's reservation (its address and its quota bytes) for hours, and a step forward
// expired every idle fill at once.
#pragma once

#include <time.h>

#include <cstdint>

namespace gpucache {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t LeaseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace gpucache
