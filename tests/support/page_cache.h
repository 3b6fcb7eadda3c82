// Helpers shared by the benchmarks and the tests that measure or need cold reads.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <vector>

namespace gpucache::test {

// Writes back and drops the page cache (root only): the next read of any file comes from its
// device. False when the kernel refused.
inline bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  return static_cast<bool>(f.flush());
}

// The median of repeated measurements (the upper one of an even count).
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace gpucache::test
