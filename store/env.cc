#include "store/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "store/posix_io.h"

namespace gpucache {
namespace {

// ReadWhole's default: a copy on the heap.
class CopiedFile final : public WholeFile {
 public:
  explicit CopiedFile(size_t size) : bytes_(new uint8_t[size]), size_(size) {}  // not zeroed: read over
  std::span<const uint8_t> bytes() const override { return {bytes_.get(), size_}; }
  std::span<uint8_t> writable() { return {bytes_.get(), size_}; }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
  size_t size_;
};

// The POSIX Env's: the file mapped, its pages those of the page cache.
class MappedFile final : public WholeFile {
 public:
  MappedFile(void* at, size_t size) : at_(at), size_(size) {}
  ~MappedFile() override { ::munmap(at_, size_); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::span<const uint8_t> bytes() const override { return {static_cast<const uint8_t*>(at_), size_}; }

 private:
  void* const at_;
  const size_t size_;
};

FileStat FileStatOf(const struct stat& st) {
  FileStat f;
  f.inode = st.st_ino;
  f.size = static_cast<uint64_t>(st.st_size);
  f.ctime_sec = st.st_ctim.tv_sec;
  f.ctime_nsec = st.st_ctim.tv_nsec;
  f.uid = st.st_uid;
  f.gid = st.st_gid;
  f.regular = S_ISREG(st.st_mode);
  f.directory = S_ISDIR(st.st_mode);
  return f;
}

class PosixEnv final : public Env {
 public:
  int CreateExclusive(const std::string& path) override {
    return OpenNoSymlinks(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  int CreateNameless(int dir_fd) override {
    int fd = ::openat(dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -errno;
    // A filesystem without O_TMPFILE: a unique name, unlinked at once.
    for (int attempt = 0; attempt < 16; ++attempt) {
      static std::atomic<uint64_t> next{0};
      std::string name = "nameless-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
      fd = ::openat(dir_fd, name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::unlinkat(dir_fd, name.c_str(), 0);
        return fd;
      }
      if (errno != EEXIST) break;
    }
    return -errno;
  }
  int OpenRead(const std::string& path) override {
    // O_NONBLOCK: a FIFO (or a device node) at a path of the data directory, put there by
    // hand or by damage, must not hold the opener until a writer comes; only regular files and
    // directories are kept open, anything else is EINVAL (an I/O error to the store).
    int fd = OpenNoSymlinks(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return fd;
    struct stat st;
    int err = ::fstat(fd, &st) != 0 ? errno : (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) ? 0 : EINVAL;
    // The flag goes again: a regular file's reads ignore it, but io_uring would answer EAGAIN
    // for data not in the page cache instead of waiting for the disk.
    if (err == 0 && ::fcntl(fd, F_SETFL, 0) != 0) err = errno;
    if (err != 0) {
      ::close(fd);
      return -err;
    }
    return fd;
  }
  int OpenAppend(const std::string& path, bool truncate) override {
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0);
    // 0600: the journal, EPOCH, PINS and the marker name every tenant's blocks (review,
    // 2026-12-07: 0644 let any local user read them in a data directory the operator made 0755).
    int fd = OpenNoSymlinks(path, flags, 0600);
    // One made 0644 by an older gpucache (a journal appended to, PINS, the marker) too.
    if (fd >= 0) ::fchmod(fd, 0600);
    return fd;
  }
  StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    return PwriteFull(fd, data, offset);
  }
  StatusCode Append(int fd, std::span<const uint8_t> data) override {
    while (!data.empty()) {
      ssize_t n = ::write(fd, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return StatusFromErrno(errno);
      if (n == 0) return StatusCode::kNoSpace;
      data = data.subspan(static_cast<size_t>(n));
    }
    return StatusCode::kOk;
  }
  StatusCode Read(int fd, std::span<uint8_t> out, uint64_t offset) override {
    return PreadFull(fd, out, offset);
  }
  Result<std::unique_ptr<WholeFile>> ReadWhole(int fd, uint64_t size) override {
    if (size == 0) return Env::ReadWhole(fd, size);  // nothing to map
    // MAP_POPULATE: the pages are read in and mapped now, in one call, not faulted one by one.
    void* at = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (at == MAP_FAILED) return Env::ReadWhole(fd, size);  // a filesystem that cannot map: read
    return std::unique_ptr<WholeFile>(std::make_unique<MappedFile>(at, static_cast<size_t>(size)));
  }
  Result<size_t> ReadUpTo(int fd, std::span<uint8_t> out, uint64_t offset) override {
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return StatusFromErrno(errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
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
    ParentDir a = OpenParentNoSymlinks(from);
    ParentDir b = OpenParentNoSymlinks(to);
    if (!a.dir.valid()) return StatusFromErrno(-a.dir.get());
    if (!b.dir.valid()) return StatusFromErrno(-b.dir.get());
    return ::renameat(a.dir.get(), a.name.c_str(), b.dir.get(), b.name.c_str()) == 0
               ? StatusCode::kOk
               : StatusFromErrno(errno);
  }
  StatusCode SyncDir(const std::string& dir) override { return FsyncDirectory(dir); }
  StatusCode Remove(const std::string& path) override {
    ParentDir p = OpenParentNoSymlinks(path);
    if (!p.dir.valid()) return StatusFromErrno(-p.dir.get());
    return ::unlinkat(p.dir.get(), p.name.c_str(), 0) == 0 ? StatusCode::kOk : StatusFromErrno(errno);
  }
  Result<FileStat> StatAt(int dir_fd, const std::string& name) override {
    struct stat st {};
    if (dir_fd >= 0) {
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return StatusFromErrno(errno);
      return FileStatOf(st);
    }
    ParentDir p = OpenParentNoSymlinks(name);
    if (!p.dir.valid()) return StatusFromErrno(-p.dir.get());
    if (::fstatat(p.dir.get(), p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return StatusFromErrno(errno);
    return FileStatOf(st);
  }
  Result<FileStat> StatFd(int fd) override {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return StatusFromErrno(errno);
    return FileStatOf(st);
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    int fd = OpenNoSymlinks(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return StatusFromErrno(-fd);
    DIR* dir = ::fdopendir(fd);
    if (!dir) {
      ::close(fd);
      return StatusFromErrno(errno);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(dir)) {
      std::string_view name(e->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
    int err = errno;
    ::closedir(dir);
    if (err != 0) return StatusFromErrno(err);
    return names;
  }
  StatusCode MakeDir(const std::string& path) override {
    ParentDir p = OpenParentNoSymlinks(path);
    if (!p.dir.valid()) return StatusFromErrno(-p.dir.get());
    if (::mkdirat(p.dir.get(), p.name.c_str(), 0700) == 0) return StatusCode::kOk;
    return errno == EEXIST ? StatusCode::kExists : StatusFromErrno(errno);
  }
  StatusCode RemoveDir(const std::string& path) override {
    ParentDir p = OpenParentNoSymlinks(path);
    if (!p.dir.valid()) return StatusFromErrno(-p.dir.get());
    if (::unlinkat(p.dir.get(), p.name.c_str(), AT_REMOVEDIR) == 0) return StatusCode::kOk;
    return errno == ENOTEMPTY || errno == EEXIST ? StatusCode::kNotEmpty : StatusFromErrno(errno);
  }
  StatusCode Chown(const std::string& path, uint32_t uid, uint32_t gid) override {
    ParentDir p = OpenParentNoSymlinks(path);
    if (!p.dir.valid()) return StatusFromErrno(-p.dir.get());
    if (::fchownat(p.dir.get(), p.name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) == 0) return StatusCode::kOk;
    return errno == EPERM ? StatusCode::kAccessDenied : StatusFromErrno(errno);
  }
  int OpenLockFile(const std::string& path) override {
    return OpenNoSymlinks(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  }
  StatusCode TryLock(int fd) override {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return StatusCode::kOk;
    return errno == EWOULDBLOCK ? StatusCode::kBusy : StatusFromErrno(errno);
  }
  Result<FsSpace> SpaceOf(const std::string& path) override {
    struct statvfs v {};
    if (::statvfs(path.c_str(), &v) != 0) return StatusFromErrno(errno);
    return FsSpace{uint64_t{v.f_bavail} * v.f_frsize, uint64_t{v.f_blocks} * v.f_frsize};
  }
};

}  // namespace

Result<std::unique_ptr<WholeFile>> Env::ReadWhole(int fd, uint64_t size) {
  auto copy = std::make_unique<CopiedFile>(static_cast<size_t>(size));
  if (StatusCode s = Read(fd, copy->writable(), 0); s != StatusCode::kOk) return s;
  return std::unique_ptr<WholeFile>(std::move(copy));
}

Env& Env::Posix() {
  static PosixEnv env;
  return env;
}

StatusCode WriteFileAtomically(Env& env, const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp";
  Fd fd(env.OpenAppend(tmp, /*truncate=*/true));
  if (!fd.valid()) return StatusFromErrno(-fd.get());
  auto bytes = std::span(reinterpret_cast<const uint8_t*>(contents.data()), contents.size());
  if (StatusCode s = env.Append(fd.get(), bytes); s != StatusCode::kOk) return s;
  if (StatusCode s = env.SyncData(fd.get()); s != StatusCode::kOk) return s;
  fd.Reset();
  if (StatusCode s = env.Rename(tmp, path); s != StatusCode::kOk) return s;
  std::string dir = path.substr(0, path.find_last_of('/'));
  return env.SyncDir(dir.empty() ? "/" : dir);
}

}  // namespace gpucache
