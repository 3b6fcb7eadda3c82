// Env: every file operation of the file medium behind a seam (docs/architecture.md). FileMedium
// calls these for the temporary file it writes, seals and renames into place, for the blocks it
// loads at start-up and opens for reading, for namespace directories, and for its index files
// (INDEX, JOURNAL); the real implementation is POSIX, and the tests put a fault-injecting
// wrapper in between (tests/support/fault_env.h: ENOSPC, EIO and short writes at any call, and
// power loss that drops whatever was not made durable). errno becomes a StatusCode here, once.
//
// The POSIX implementation follows no symbolic link in any component of a path (openat2's
// RESOLVE_NO_SYMLINKS): a data directory's root is resolved once when it is opened
// (ClaimDataDir), and a link found below it is an error (ELOOP), never a way out of it.
//
// Thread safety: implementations may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "store/status.h"

namespace gpucache {

// What the medium checks of a file: enough to tell it is still the file an index entry saw.
struct FileStat {
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t ctime_sec = 0;
  int64_t ctime_nsec = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool regular = false;
  bool directory = false;
};

// What statvfs says of the filesystem holding a path, in bytes available to the daemon.
struct FsSpace {
  uint64_t free_bytes = 0;   // f_bavail * f_frsize
  uint64_t total_bytes = 0;  // f_blocks * f_frsize
};

// The bytes of a whole file, read-only, for as long as this lives (Env::ReadWhole).
class WholeFile {
 public:
  virtual ~WholeFile() = default;
  virtual std::span<const uint8_t> bytes() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // Creates `path` exclusively, read-write, mode 0600: the descriptor, or -errno.
  virtual int CreateExclusive(const std::string& path) = 0;
  // Creates a file with no name, read-write, in the open directory `dir_fd` (O_TMPFILE, or
  // created and unlinked at once where the filesystem lacks it): its space goes back when its
  // last descriptor closes. The descriptor, or -errno.
  virtual int CreateNameless(int dir_fd) = 0;
  // Opens an existing file or directory read-only, not following a symlink at its end: the
  // descriptor, or -errno.
  virtual int OpenRead(const std::string& path) = 0;
  // Opens `path` write-only for appending (created 0644 if missing; emptied if `truncate`).
  virtual int OpenAppend(const std::string& path, bool truncate) = 0;
  // Writes all of `data` at `offset` (retrying short transfers), or the error that stopped it.
  virtual StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) = 0;
  // Writes `data` at the end of a file opened by OpenAppend, in one write where it can: a crash
  // leaves the earlier records whole.
  virtual StatusCode Append(int fd, std::span<const uint8_t> data) = 0;
  // Reads exactly out.size() bytes; kIoError at end of file.
  virtual StatusCode Read(int fd, std::span<uint8_t> out, uint64_t offset) = 0;
  // Reads up to out.size() bytes: how many (fewer only at the end of the file).
  virtual Result<size_t> ReadUpTo(int fd, std::span<uint8_t> out, uint64_t offset) = 0;
  // The first `size` bytes of `fd` (its size, stat'ed by the caller), read-only. By default a
  // copy read through Read, so a test Env's faults reach it; the POSIX Env maps the file
  // instead (a 150 MB INDEX at a start: no copy, and no anonymous pages to zero first). The
  // file must not shrink while the bytes are used: the daemon's own files, under its LOCK.
  virtual Result<std::unique_ptr<WholeFile>> ReadWhole(int fd, uint64_t size);
  virtual StatusCode Truncate(int fd, uint64_t size) = 0;
  // Allocates [offset, offset + len) on disk and extends the file over it (fallocate mode 0),
  // so later writes there cannot meet a full disk; kNotSupported where the filesystem cannot.
  virtual StatusCode Allocate(int fd, uint64_t offset, uint64_t len) = 0;
  virtual StatusCode SyncData(int fd) = 0;
  virtual StatusCode Rename(const std::string& from, const std::string& to) = 0;
  virtual StatusCode SyncDir(const std::string& dir) = 0;
  // Unlinks `path`; kNotFound if it was not there.
  virtual StatusCode Remove(const std::string& path) = 0;
  // The entry `name` of the directory `dir_fd` (or, with dir_fd < 0, the path `name`), not
  // following a symlink at its end.
  virtual Result<FileStat> StatAt(int dir_fd, const std::string& name) = 0;
  virtual Result<FileStat> StatFd(int fd) = 0;
  // The names in a directory, without "." and "..".
  virtual Result<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  // Creates a directory, mode 0700; kExists if something is there.
  virtual StatusCode MakeDir(const std::string& path) = 0;
  // Removes an empty directory; kNotFound if it was not there, kNotEmpty if it holds entries.
  virtual StatusCode RemoveDir(const std::string& path) = 0;
  // kAccessDenied where the process may not give the file away (not root).
  virtual StatusCode Chown(const std::string& path, uint32_t uid, uint32_t gid) = 0;
  // Opens `path` read-write, creating it (mode 0600) if missing and keeping what it holds: a
  // data directory's LOCK. The descriptor, or -errno.
  virtual int OpenLockFile(const std::string& path) = 0;
  // Takes an exclusive flock() on `fd` without waiting; it lasts while `fd` is open. kBusy if
  // another open file description holds it (another daemon).
  virtual StatusCode TryLock(int fd) = 0;
  // The space of the filesystem holding `path`.
  virtual Result<FsSpace> SpaceOf(const std::string& path) = 0;

  // The process-wide POSIX implementation.
  static Env& Posix();
};

// Replaces `path` with `contents` so that a crash leaves the old or the new file, never a mix:
// `path`.tmp written and synced, renamed over `path`, its directory synced. Through `env`, so
// fault injection and the power-loss model reach EPOCH and PINS like every other file.
StatusCode WriteFileAtomically(Env& env, const std::string& path, const std::string& contents);

// Every call passed on to `target`: a base for Envs that change one or two calls (tests).
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env& target = Env::Posix()) : t_(target) {}
  int CreateExclusive(const std::string& p) override { return t_.CreateExclusive(p); }
  int CreateNameless(int dir_fd) override { return t_.CreateNameless(dir_fd); }
  int OpenRead(const std::string& p) override { return t_.OpenRead(p); }
  int OpenAppend(const std::string& p, bool truncate) override { return t_.OpenAppend(p, truncate); }
  StatusCode Write(int fd, std::span<const uint8_t> d, uint64_t o) override { return t_.Write(fd, d, o); }
  StatusCode Append(int fd, std::span<const uint8_t> d) override { return t_.Append(fd, d); }
  StatusCode Read(int fd, std::span<uint8_t> out, uint64_t o) override { return t_.Read(fd, out, o); }
  Result<size_t> ReadUpTo(int fd, std::span<uint8_t> out, uint64_t o) override {
    return t_.ReadUpTo(fd, out, o);
  }
  Result<std::unique_ptr<WholeFile>> ReadWhole(int fd, uint64_t size) override {
    return t_.ReadWhole(fd, size);
  }
  StatusCode Truncate(int fd, uint64_t size) override { return t_.Truncate(fd, size); }
  StatusCode Allocate(int fd, uint64_t o, uint64_t len) override { return t_.Allocate(fd, o, len); }
  StatusCode SyncData(int fd) override { return t_.SyncData(fd); }
  StatusCode Rename(const std::string& a, const std::string& b) override { return t_.Rename(a, b); }
  StatusCode SyncDir(const std::string& d) override { return t_.SyncDir(d); }
  StatusCode Remove(const std::string& p) override { return t_.Remove(p); }
  Result<FileStat> StatAt(int dir_fd, const std::string& n) override { return t_.StatAt(dir_fd, n); }
  Result<FileStat> StatFd(int fd) override { return t_.StatFd(fd); }
  Result<std::vector<std::string>> ListDir(const std::string& d) override { return t_.ListDir(d); }
  StatusCode MakeDir(const std::string& p) override { return t_.MakeDir(p); }
  StatusCode RemoveDir(const std::string& p) override { return t_.RemoveDir(p); }
  StatusCode Chown(const std::string& p, uint32_t uid, uint32_t gid) override {
    return t_.Chown(p, uid, gid);
  }
  int OpenLockFile(const std::string& p) override { return t_.OpenLockFile(p); }
  StatusCode TryLock(int fd) override { return t_.TryLock(fd); }
  Result<FsSpace> SpaceOf(const std::string& p) override { return t_.SpaceOf(p); }

 private:
  Env& t_;
};

}  // namespace gpucache
