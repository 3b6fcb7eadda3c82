// Helpers shared by the benchmarks and the tests that measure or need cold reads.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
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

// Writes back and drops the cached pages of one file only: unlike DropCaches it neither waits
// for every filesystem's writeback nor disturbs tests running beside it.
inline bool EvictFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

// The median of repeated measurements (the upper one of an even count).
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace gpucache::test
