#include "store/posix_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>

namespace gpucache {

StatusCode StatusFromErrno(int err) {
  switch (err) {
    case ENOSPC: return StatusCode::kNoSpace;
    case EDQUOT: return StatusCode::kNoSpace;
    case EFBIG: return StatusCode::kTooLarge;
    case ENOENT: return StatusCode::kNotFound;
    case EMFILE:  // the daemon's fd table is full (per process or system-wide):
    case ENFILE:  // nothing is wrong with the block, so not an I/O error
      return StatusCode::kNoHandles;
    default: return StatusCode::kIoError;
  }
}

StatusCode PreadFull(int fd, std::span<uint8_t> out, uint64_t offset) {
  while (!out.empty()) {
    ssize_t n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return StatusFromErrno(errno);
    if (n == 0) return StatusCode::kIoError;  // the file is shorter than its header says
    out = out.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return StatusCode::kOk;
}

StatusCode PwriteFull(int fd, std::span<const uint8_t> data, uint64_t offset) {
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return StatusFromErrno(errno);
    if (n == 0) return StatusCode::kNoSpace;
    data = data.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return StatusCode::kOk;
}

StatusCode FsyncDirectory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return StatusFromErrno(errno);
  return ::fsync(fd.get()) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
}

void AdviseHugePages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (data == nullptr || end <= begin) return;
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace gpucache
