// Env: the file operations of a block's commit path behind a seam (docs/architecture.md).
// FileStore calls these for the temporary file it writes, seals and renames into place; the
// real implementation is POSIX, and the tests put a fault-injecting wrapper in between
// (tests/support/fault_env.h: ENOSPC, EIO and short writes at any call, and power loss that
// drops whatever was not made durable). errno becomes a StatusCode here, once.
//
// Thread safety: implementations may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "store/status.h"

namespace gpucache {

class Env {
 public:
  virtual ~Env() = default;
  // Creates `path` exclusively, read-write, mode 0600: the descriptor, or -errno.
  virtual int CreateExclusive(const std::string& path) = 0;
  // Writes all of `data` at `offset` (retrying short transfers), or the error that stopped it.
  virtual StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) = 0;
  // Reads exactly out.size() bytes; kIoError at end of file.
  virtual StatusCode Read(int fd, std::span<uint8_t> out, uint64_t offset) = 0;
  virtual StatusCode Truncate(int fd, uint64_t size) = 0;
  // Allocates [offset, offset + len) on disk and extends the file over it (fallocate mode 0),
  // so later writes there cannot meet a full disk; kNotSupported where the filesystem cannot.
  virtual StatusCode Allocate(int fd, uint64_t offset, uint64_t len) = 0;
  virtual StatusCode SyncData(int fd) = 0;
  virtual StatusCode Rename(const std::string& from, const std::string& to) = 0;
  virtual StatusCode SyncDir(const std::string& dir) = 0;
  // Unlinks `path`; kNotFound if it was not there.
  virtual StatusCode Remove(const std::string& path) = 0;

  // The process-wide POSIX implementation.
  static Env& Posix();
};

}  // namespace gpucache
