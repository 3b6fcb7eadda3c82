// FaultEnv: an Env (store/env.h) over the real POSIX one that can
//   - fail one call of the commit path with ENOSPC, EIO, or a short write (half the bytes
//     land, then ENOSPC), counted from when the fault was armed;
//   - "crash" after N calls: that call and every later one does nothing and fails, as if the
//     process had died there;
//   - simulate a power loss (after the store is gone): every byte not made durable is lost,
//     as leveldb's FaultInjectionTestEnv does. Data is durable once SyncData ran on it; a
//     created or renamed name once SyncDir ran on its directory. On PowerLoss() renames whose
//     directory was not synced are undone, names never made durable disappear, and files keep
//     only their last synced contents (none: empty).
// Files the store did not create through this Env (EPOCH, PINS, LOCK) are not tracked.
//
// Thread safety: one mutex around everything; tests drive the store from one thread.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
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
  uint64_t calls() const {
    std::lock_guard l(mu_);
    return calls_;
  }
  bool crashed() const {
    std::lock_guard l(mu_);
    return crash_at_ && calls_ > *crash_at_;
  }

  int CreateExclusive(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(false)) return *s == StatusCode::kNoSpace ? -ENOSPC : -EIO;
    int fd = Env::Posix().CreateExclusive(path);
    if (fd >= 0) {
      paths_[fd] = path;
      files_[path] = File{};
    }
    return fd;
  }
  StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(true)) {
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
    if (auto s = Begin(false)) return *s;
    return Env::Posix().Read(fd, out, offset);
  }
  StatusCode Truncate(int fd, uint64_t size) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(false)) return *s;
    return Env::Posix().Truncate(fd, size);
  }
  StatusCode Allocate(int fd, uint64_t offset, uint64_t len) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(false)) return *s;
    return Env::Posix().Allocate(fd, offset, len);
  }
  StatusCode SyncData(int fd) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(false)) return *s;
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
    if (auto s = Begin(false)) return *s;
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
    if (auto s = Begin(false)) return *s;
    StatusCode s = Env::Posix().SyncDir(dir);
    if (s != StatusCode::kOk) return s;
    for (auto& [path, f] : files_) {
      if (DirOf(path) == dir) f.name_durable = true;
    }
    std::vector<std::pair<std::string, std::string>> still;
    for (auto& r : renames_) {
      if (DirOf(r.second) != dir) still.push_back(r);
    }
    renames_ = still;
    return s;
  }
  StatusCode Remove(const std::string& path) override {
    std::lock_guard l(mu_);
    if (auto s = Begin(false)) return *s;
    StatusCode s = Env::Posix().Remove(path);
    files_.erase(path);
    return s;
  }

  // REQUIRES: the store using this Env is destroyed (its descriptors closed).
  void PowerLoss() {
    std::lock_guard l(mu_);
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
    files_.clear();
    renames_.clear();
    paths_.clear();
  }

 private:
  struct File {
    bool name_durable = false;
    std::optional<std::string> synced;  // contents at the last SyncData; none: nothing synced
  };

  // nullopt: perform the call. Else the status to fail it with (kOk: a short write).
  std::optional<StatusCode> Begin(bool is_write) {
    uint64_t n = calls_++;
    if (crash_at_ && n >= *crash_at_) return StatusCode::kIoError;
    if (fail_at_ && n == *fail_at_) {
      fail_at_.reset();
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
  Fault fault_ = Fault::kNoSpace;
  std::map<int, std::string> paths_;   // open descriptors of tracked files
  std::map<std::string, File> files_;  // tracked files by current name
  std::vector<std::pair<std::string, std::string>> renames_;  // not yet durable: from, to
};

}  // namespace gpucache::test
