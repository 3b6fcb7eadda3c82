#include "store/env.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "store/posix_io.h"

namespace gpucache {
namespace {

class PosixEnv final : public Env {
 public:
  int CreateExclusive(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    return fd >= 0 ? fd : -errno;
  }
  StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    return PwriteFull(fd, data, offset);
  }
  StatusCode Read(int fd, std::span<uint8_t> out, uint64_t offset) override {
    return PreadFull(fd, out, offset);
  }
  StatusCode Truncate(int fd, uint64_t size) override {
    return ::ftruncate(fd, static_cast<off_t>(size)) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
  }
  StatusCode Allocate(int fd, uint64_t offset, uint64_t len) override {
    if (::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0) return StatusCode::kOk;
    return errno == EOPNOTSUPP ? StatusCode::kNotSupported : StatusFromErrno(errno);
  }
  StatusCode SyncData(int fd) override {
    return ::fdatasync(fd) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
  }
  StatusCode Rename(const std::string& from, const std::string& to) override {
    return ::rename(from.c_str(), to.c_str()) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
  }
  StatusCode SyncDir(const std::string& dir) override { return FsyncDirectory(dir); }
  StatusCode Remove(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
  }
};

}  // namespace

Env& Env::Posix() {
  static PosixEnv env;
  return env;
}

}  // namespace gpucache
