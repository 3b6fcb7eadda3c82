// Small POSIX helpers for the file medium: an owning file descriptor and full-length
// pread/pwrite that retry on EINTR and short transfers. errno is converted to a StatusCode here,
// once, on the way into the store.
#pragma once

#include <unistd.h>

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "store/status.h"

namespace gpucache {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(o.Release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.Release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// errno of a failed backing-storage call -> StatusCode.
StatusCode StatusFromErrno(int err);

// Reads exactly out.size() bytes; kIoError on EOF before that.
StatusCode PreadFull(int fd, std::span<uint8_t> out, uint64_t offset);
StatusCode PwriteFull(int fd, std::span<const uint8_t> data, uint64_t offset);
StatusCode FsyncDirectory(const std::string& dir);

// Opens `path` (absolute) with `flags` (and `mode` for O_CREAT) refusing a symbolic link in any
// of its components, so a link planted inside a data directory cannot lead a start's cleanup or
// a block's open to another tenant's or the host's files (docs/reliability.md, "Operator
// mistakes"). openat2's RESOLVE_NO_SYMLINKS where the kernel has it, else one component at a
// time with O_NOFOLLOW. The descriptor, or -errno (ELOOP for a link).
int OpenNoSymlinks(const std::string& path, int flags, mode_t mode = 0);
// The directory holding `path`, opened O_PATH without following links (as above), and the last
// component: for unlinkat, renameat, mkdirat and fstatat on a path that must not pass a link.
struct ParentDir {
  Fd dir;
  std::string name;
};
// -errno in `dir` on failure; the name is never empty, "." or "..".
ParentDir OpenParentNoSymlinks(const std::string& path);

// A configuration, keyring or credentials file read whole: opened without blocking (a FIFO or a
// device named by mistake must not hang a start or a reload), only a regular file (a symlink to
// one is followed: secret volumes are links), at most `max_bytes`. On failure, empty and
// `error` says why in words that name the path.
std::optional<std::string> ReadSmallRegularFile(const std::string& path, size_t max_bytes,
                                                std::string* error);

// Asks for transparent huge pages under the whole 2 MiB pages of [data, data + bytes): for an
// array about to be filled at start-up (the index, the INDEX entries). A page fault costs
// several microseconds on a VM, and tens of megabytes in 4 KiB pages took about a third of a
// restart's CPU (docs/performance.md, "Restart"). Advice only: ignored where THP is off.
void AdviseHugePages(const void* data, size_t bytes);
template <class Vector>
void AdviseHugePages(const Vector& v) {
  AdviseHugePages(v.data(), v.capacity() * sizeof(typename Vector::value_type));
}

}  // namespace gpucache
