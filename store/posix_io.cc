#include "store/posix_io.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstring>

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
  Fd fd(OpenNoSymlinks(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return StatusFromErrno(-fd.get());
  return ::fsync(fd.get()) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
}

namespace {

std::atomic<bool> no_openat2{false};  // the kernel answered ENOSYS once: walk by hand from then on

// One component at a time, each opened O_NOFOLLOW: for kernels before 5.6 (no openat2).
int OpenByComponents(const std::string& path, int flags, mode_t mode) {
  Fd dir(::open(path.starts_with('/') ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return -errno;
  size_t begin = path.find_first_not_of('/');
  if (begin == std::string::npos) {  // "/" or "."
    int fd = ::openat(dir.get(), ".", flags | O_CLOEXEC, mode);
    return fd >= 0 ? fd : -errno;
  }
  while (true) {
    size_t end = path.find('/', begin);
    size_t next = end == std::string::npos ? end : path.find_first_not_of('/', end);
    std::string name = path.substr(begin, end == std::string::npos ? end : end - begin);
    if (next == std::string::npos) {  // the last component
      int fd = ::openat(dir.get(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
      return fd >= 0 ? fd : -errno;
    }
    Fd sub(::openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) return errno == ENOTDIR ? -ELOOP : -errno;
    dir = std::move(sub);
    begin = next;
  }
}

}  // namespace

int OpenNoSymlinks(const std::string& path, int flags, mode_t mode) {
  if (!no_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_NO_SYMLINKS;
    while (true) {
      long fd = ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how));
      if (fd >= 0) return static_cast<int>(fd);
      if (errno == EINTR || errno == EAGAIN) continue;  // EAGAIN: a rename raced the walk
      if (errno != ENOSYS) return -errno;
      no_openat2.store(true, std::memory_order_relaxed);
      break;
    }
  }
  return OpenByComponents(path, flags, mode);
}

ParentDir OpenParentNoSymlinks(const std::string& path) {
  ParentDir p;
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  p.name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (p.name.empty() || p.name == "." || p.name == "..") {
    p.dir = Fd(-EINVAL);
    return p;
  }
  p.dir = Fd(OpenNoSymlinks(dir, O_PATH | O_DIRECTORY));
  return p;
}

std::optional<std::string> ReadSmallRegularFile(const std::string& path, size_t max_bytes,
                                                std::string* error) {
  auto fail = [&](const std::string& why) {
    *error = path + ": " + why;
    return std::nullopt;
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) {
    return fail(errno == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail("cannot stat");
  if (S_ISDIR(st.st_mode)) return fail("is a directory, not a file");
  if (!S_ISREG(st.st_mode)) return fail("is not a regular file (a FIFO, socket or device?)");
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return fail("larger than " + std::to_string(max_bytes) + " bytes; refusing to read it");
  }
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');  // one more: a file that grew
  size_t n = 0;
  while (n < text.size()) {
    ssize_t r = ::read(fd.get(), text.data() + n, text.size() - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(std::string("cannot read: ") + std::strerror(errno));
    if (r == 0) break;
    n += static_cast<size_t>(r);
  }
  if (n > max_bytes) return fail("larger than " + std::to_string(max_bytes) + " bytes; refusing to read it");
  text.resize(n);
  return text;
}

void AdviseHugePages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (data == nullptr || end <= begin) return;
  (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace gpucache
