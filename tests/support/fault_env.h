// FaultEnv: an Env (store/env.h) over the real POSIX one that can
//   - fail one call with ENOSPC, EIO, or a short write (half the bytes land, then ENOSPC),
//     counted from when the fault was armed, or the next call of one kind (FailNext);
//   - "crash" after N calls: that call and every later one does nothing and fails, as if the
//     process had died there;
//   - simulate a power loss (after the store is gone): every byte not made durable is lost,
//     as leveldb's FaultInjectionTestEnv does. Data is durable once SyncData ran on it; a
//     created or renamed name once SyncDir ran on its directory. On PowerLoss() renames whose
//     directory was not synced are undone, names never made durable disappear, and files keep
//     only their last synced contents (none: empty); a durable name removed comes back (with
//     its synced contents) unless its directory was synced after the removal; a directory
//     made by MakeDir goes, with everything in it, unless its parent was synced after.
// Only files made by CreateExclusive are tracked for power loss (block files, INDEX through
// its INDEX.tmp): the journal (OpenAppend) and the files the store does not write through this
// Env (EPOCH, PINS, LOCK) keep what was written. Every call is logged by kind (ops()), so a test can find the call it wants.
//
// Thread safety: one mutex around everything; tests drive the store from one thread.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "store/env.h"

namespace gpucache::test {

class FaultEnv final : public Env {
 public:
  enum class Fault { kNoSpace, kIoError, kShortWrite };
  enum class Op {
    kCreate, kOpenRead, kOpenAppend, kWrite, kAppend, kRead, kReadUpTo, kTruncate, kAllocate,
    kSyncData, kRename, kSyncDir, kRemove, kStat, kListDir, kMakeDir, kRemoveDir, kChown
  };

  // Fails the `n`-th call (0-based, from now) with `fault` (a short write only applies to a
  // Write; other calls get ENOSPC).
  void FailCall(uint64_t n, Fault fault) {
    std::lock_guard l(mu_);
    fail_at_ = calls_ + n;
    fault_ = fault;
  }
  // The `n`-th call from now and all after it fail without doing anything.
  void CrashAfter(uint64_t n) {
    std::lock_guard l(mu_);
    crash_at_ = calls_ + n;
  }
  // Fails the next call of kind `op` (whenever it comes) with `fault`. Armed for several kinds
  // at once (one call each), every one fails with the last `fault` given.
  void FailNext(Op op, Fault fault) {
    std::lock_guard l(mu_);
    fail_ops_.push_back(op);
    fault_ = fault;
  }
  // Fails the next Read at or past `offset` with `fault`. With kBlockDataOffset: the next read
  // of a block's payload fails, while the reads of its header at each open pass.
  void FailNextReadFrom(uint64_t offset, Fault fault) {
    std::lock_guard l(mu_);
    fail_read_from_ = offset;
    fault_ = fault;
  }
  uint64_t calls() const {
    std::lock_guard l(mu_);
    return calls_;
  }
  // The kind of every call so far, in order (index = the call's number).
  std::vector<Op> ops() const {
    std::lock_guard l(mu_);
    return ops_;
  }
  bool crashed() const {
    std::lock_guard l(mu_);
    return crash_at_ && calls_ > *crash_at_;
  }

  int CreateNameless(int dir_fd) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kCreate)) return *s == StatusCode::kNoSpace ? -ENOSPC : -EIO;
    return Env::Posix().CreateNameless(dir_fd);
  }
  int CreateExclusive(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kCreate)) return *s == StatusCode::kNoSpace ? -ENOSPC : -EIO;
    int fd = Env::Posix().CreateExclusive(path);
    if (fd >= 0) {
      paths_[fd] = path;
      files_[path] = File{};
    }
    return fd;
  }
  StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kWrite)) {
      if (*s == StatusCode::kOk) {  // the short write: half lands, then the disk is full
        Env::Posix().Write(fd, data.first(data.size() / 2), offset);
        return StatusCode::kNoSpace;
      }
      return *s;
    }
    return Env::Posix().Write(fd, data, offset);
  }
  StatusCode Read(int fd, std::span<uint8_t> out, uint64_t offset) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kRead)) return *s;
    if (fail_read_from_ && offset >= *fail_read_from_) {
      fail_read_from_.reset();
      return fault_ == Fault::kIoError ? StatusCode::kIoError : StatusCode::kNoSpace;
    }
    return Env::Posix().Read(fd, out, offset);
  }
  StatusCode Truncate(int fd, uint64_t size) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kTruncate)) return *s;
    return Env::Posix().Truncate(fd, size);
  }
  StatusCode Allocate(int fd, uint64_t offset, uint64_t len) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kAllocate)) return *s;
    return Env::Posix().Allocate(fd, offset, len);
  }
  StatusCode SyncData(int fd) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kSyncData)) return *s;
    StatusCode s = Env::Posix().SyncData(fd);
    auto p = paths_.find(fd);
    if (s == StatusCode::kOk && p != paths_.end()) {
      auto f = files_.find(p->second);
      if (f != files_.end()) f->second.synced = Contents(p->second);
    }
    return s;
  }
  StatusCode Rename(const std::string& from, const std::string& to) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kRename)) return *s;
    StatusCode s = Env::Posix().Rename(from, to);
    if (s != StatusCode::kOk) return s;
    auto f = files_.find(from);
    if (f != files_.end()) {
      File moved = f->second;
      files_.erase(f);
      moved.name_durable = false;
      files_[to] = moved;
      renames_.push_back({from, to});
      for (auto& [fd, path] : paths_) {
        if (path == from) path = to;
      }
    }
    return s;
  }
  StatusCode SyncDir(const std::string& dir) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kSyncDir)) return *s;
    StatusCode s = Env::Posix().SyncDir(dir);
    if (s != StatusCode::kOk) return s;
    for (auto& [path, f] : files_) {
      if (DirOf(path) == dir) f.name_durable = true;
    }
    for (auto& [path, durable] : dirs_made_) {
      if (DirOf(path) == dir) durable = true;
    }
    std::vector<std::pair<std::string, std::string>> still;
    for (auto& r : renames_) {
      if (DirOf(r.second) != dir) still.push_back(r);
    }
    renames_ = still;
    std::erase_if(removed_, [&](const auto& r) { return DirOf(r.first) == dir; });
    return s;
  }
  StatusCode Remove(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kRemove)) return *s;
    StatusCode s = Env::Posix().Remove(path);
    auto f = files_.find(path);
    // A durable name removed comes back at a power loss until its directory is synced.
    if (s == StatusCode::kOk && f != files_.end() && f->second.name_durable) removed_[path] = f->second;
    files_.erase(path);
    return s;
  }

  int OpenRead(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kOpenRead)) return *s == StatusCode::kNoSpace ? -ENOSPC : -EIO;
    return Env::Posix().OpenRead(path);
  }
  int OpenAppend(const std::string& path, bool truncate) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kOpenAppend)) return *s == StatusCode::kNoSpace ? -ENOSPC : -EIO;
    return Env::Posix().OpenAppend(path, truncate);
  }
  StatusCode Append(int fd, std::span<const uint8_t> data) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kAppend)) {
      if (*s != StatusCode::kOk) return *s;
      Env::Posix().Append(fd, data.first(data.size() / 2));  // a torn record
      return StatusCode::kNoSpace;
    }
    return Env::Posix().Append(fd, data);
  }
  Result<size_t> ReadUpTo(int fd, std::span<uint8_t> out, uint64_t offset) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kReadUpTo)) return *s;
    return Env::Posix().ReadUpTo(fd, out, offset);
  }
  Result<FileStat> StatAt(int dir_fd, const std::string& name) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kStat)) return *s;
    return Env::Posix().StatAt(dir_fd, name);
  }
  Result<FileStat> StatFd(int fd) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kStat)) return *s;
    return Env::Posix().StatFd(fd);
  }
  Result<std::vector<std::string>> ListDir(const std::string& dir) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kListDir)) return *s;
    return Env::Posix().ListDir(dir);
  }
  StatusCode MakeDir(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kMakeDir)) return *s;
    StatusCode s = Env::Posix().MakeDir(path);
    if (s == StatusCode::kOk) dirs_made_[path] = false;  // durable once its parent is synced
    return s;
  }
  StatusCode RemoveDir(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kRemoveDir)) return *s;
    return Env::Posix().RemoveDir(path);
  }
  StatusCode Chown(const std::string& path, uint32_t uid, uint32_t gid) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(Op::kChown)) return *s;
    return Env::Posix().Chown(path, uid, gid);
  }
  // Neither counted nor failed: taking LOCK comes before any fault is armed, and a failed
  // statvfs is no error to the store (it places and admits without it), so failing it would
  // only hide the call a test means to fail.
  int OpenLockFile(const std::string& path) override { return Env::Posix().OpenLockFile(path); }
  StatusCode TryLock(int fd) override { return Env::Posix().TryLock(fd); }
  Result<FsSpace> SpaceOf(const std::string& path) override { return Env::Posix().SpaceOf(path); }

  // REQUIRES: the store using this Env is destroyed (its descriptors closed).
  void PowerLoss() {
    std::lock_guard l(mu_);
    for (const auto& [path, f] : removed_) {  // removals never made durable: undone
      std::ofstream(path, std::ios::binary | std::ios::trunc) << f.synced.value_or("");
    }
    removed_.clear();
    for (auto it = renames_.rbegin(); it != renames_.rend(); ++it) {
      auto f = files_.find(it->second);
      if (f == files_.end()) continue;  // removed since: gone either way
      ::rename(it->second.c_str(), it->first.c_str());
      File back = f->second;
      files_.erase(f);
      files_[it->first] = back;
    }
    for (auto& [path, f] : files_) {
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) continue;
      if (!f.name_durable) {
        ::unlink(path.c_str());
      } else {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << f.synced.value_or("");
      }
    }
    // Directories made but never made durable in their parent go, with whatever is in them.
    for (auto it = dirs_made_.rbegin(); it != dirs_made_.rend(); ++it) {
      std::error_code ignored;
      if (!it->second) std::filesystem::remove_all(it->first, ignored);
    }
    files_.clear();
    renames_.clear();
    paths_.clear();
    dirs_made_.clear();
  }

 private:
  struct File {
    bool name_durable = false;
    std::optional<std::string> synced;  // contents at the last SyncData; none: nothing synced
  };

  // nullopt: perform the call. Else the status to fail it with (kOk: a short write).
  // A short write applies to Write and Append; other calls get ENOSPC.
  std::optional<StatusCode> Begin(Op op) {
    bool is_write = op == Op::kWrite || op == Op::kAppend;
    uint64_t n = calls_++;
    ops_.push_back(op);
    if (crash_at_ && n >= *crash_at_) return StatusCode::kIoError;
    auto armed = std::find(fail_ops_.begin(), fail_ops_.end(), op);
    if ((fail_at_ && n == *fail_at_) || armed != fail_ops_.end()) {
      if (fail_at_ && n == *fail_at_) fail_at_.reset();
      else fail_ops_.erase(armed);
      switch (fault_) {
        case Fault::kNoSpace: return StatusCode::kNoSpace;
        case Fault::kIoError: return StatusCode::kIoError;
        case Fault::kShortWrite: return is_write ? StatusCode::kOk : StatusCode::kNoSpace;
      }
    }
    return std::nullopt;
  }
  static std::string DirOf(const std::string& path) { return path.substr(0, path.find_last_of('/')); }
  static std::string Contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  mutable std::mutex mu_;
  uint64_t calls_ = 0;
  std::optional<uint64_t> fail_at_, crash_at_;
  std::vector<Op> fail_ops_;  // armed by FailNext, one call of each
  std::optional<uint64_t> fail_read_from_;  // armed by FailNextReadFrom
  std::vector<Op> ops_;
  Fault fault_ = Fault::kNoSpace;
  std::map<int, std::string> paths_;   // open descriptors of tracked files
  std::map<std::string, File> files_;  // tracked files by current name
  std::vector<std::pair<std::string, std::string>> renames_;  // not yet durable: from, to
  std::map<std::string, bool> dirs_made_;  // made by MakeDir: whether durable in its parent
  std::map<std::string, File> removed_;  // durable names removed, not yet durable: by name
};

}  // namespace gpucache::test
