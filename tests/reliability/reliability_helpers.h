// Helpers shared by the reliability suite (tests/reliability): self-identifying payloads, a
// commit that reports which step failed, reads that keep what they got before an error, the
// tenant counters, and a look at the data directory behind the mount.
#pragma once

#include <dirent.h>
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount/mount_helpers.h"

namespace gpucache::test {

// The seed of a randomized test: GPUCACHE_SEED if set, else the time. Printed by each test so
// that a failure can be replayed with GPUCACHE_SEED=<seed>.
inline uint64_t TestSeed() {
  if (const char* s = std::getenv("GPUCACHE_SEED")) return std::strtoull(s, nullptr, 0);
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

inline uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A small fast generator for test decisions (not for payload bytes).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t Next() { return SplitMix(state); }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }  // inclusive
  bool Chance(double p) { return static_cast<double>(Next() >> 11) * 0x1.0p-53 < p; }
};

// A distinct full 256-token block of tenant acme for every n; all in one namespace.
inline CacheIdentity RelBlock(uint64_t n, const std::string& tenant = "acme") {
  CacheIdentity id = SampleIdentity(tenant, 16);
  uint64_t x = n * 0x2545f4914f6cdd1dull + 0x1234;
  Bytes parent(16);
  for (size_t i = 0; i < 16; i += 8) {
    uint64_t v = SplitMix(x);
    for (size_t j = 0; j < 8; ++j) parent[i + j] = static_cast<uint8_t>(v >> (8 * j));
  }
  id.chain[0] = parent;
  return id;
}

// `size` bytes that name themselves: the seed and the size in the first 16 bytes (as far as they
// fit), then a stream derived from the seed. Any byte from another block or another fill shows.
inline Bytes SeededPayload(uint64_t seed, size_t size) {
  Bytes b(size);
  uint64_t x = seed ^ 0xa0761d6478bd642full;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = SplitMix(x);
    std::memcpy(b.data() + i, &v, 8);
  }
  for (uint64_t v = SplitMix(x); i < size; ++i, v >>= 8) b[i] = static_cast<uint8_t>(v);
  uint64_t head[2] = {seed, size};
  std::memcpy(b.data(), head, std::min<size_t>(size, sizeof head));
  return b;
}

// The commit protocol one step at a time, so that a test knows where it failed.
enum class Step : int { kNone = 0, kOpen, kXattr, kWrite, kClose, kRename, kDone };
inline const char* StepName(Step s) {
  static const char* names[] = {"none", "open", "xattr", "write", "close", "rename", "done"};
  return names[static_cast<int>(s)];
}

struct CommitResult {
  int err = 0;
  Step step = Step::kNone;  // the step that failed, or kDone
};

// Creates the .part (mkdir of the namespace on ENOENT), sets the identity, writes `payload` in
// `chunk`-sized write() calls, closes, renames. `at`, if given, is set to the step being taken
// before each syscall (a concurrent observer can see where a commit was). On failure the .part
// is unlinked when `cleanup` (a live daemon); a dead one has nothing to clean.
inline CommitResult CommitSteps(const std::string& mnt, const CacheIdentity& id,
                                std::span<const uint8_t> payload, size_t chunk = 1 << 20,
                                std::atomic<int>* at = nullptr, bool cleanup = true) {
  auto mark = [&](Step s) {
    if (at) at->store(static_cast<int>(s));
  };
  BlockAddress a = AddressOf(id);
  std::string dir = mnt + "/" + a.tenant + "/" + a.ns, final_path = dir + "/" + a.block;
  std::string part = final_path + ".part";
  CommitResult r;
  auto fail = [&](Step s, int err) {
    r.step = s;
    r.err = err;
    return r;
  };
  mark(Step::kOpen);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    if (::mkdir(dir.c_str(), 0770) != 0 && errno != EEXIST) return fail(Step::kOpen, errno);
    fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  }
  if (fd < 0) return fail(Step::kOpen, errno);
  Bytes canonical = EncodePhysicalKey(id);
  mark(Step::kXattr);
  Step failed = Step::kNone;
  int err = 0;
  if (::fsetxattr(fd, "user.gpucache.identity", canonical.data(), canonical.size(), 0) != 0) {
    failed = Step::kXattr;
    err = errno;
  }
  if (!err) mark(Step::kWrite);
  for (size_t off = 0; !err && off < payload.size();) {
    size_t n = std::min(chunk, payload.size() - off);
    ssize_t w = ::write(fd, payload.data() + off, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      failed = Step::kWrite;
      err = w < 0 ? errno : EIO;
    } else {
      off += static_cast<size_t>(w);
    }
  }
  if (!err) mark(Step::kClose);
  if (::close(fd) != 0 && !err) {
    failed = Step::kClose;
    err = errno;
  }
  if (!err) {
    mark(Step::kRename);
    if (::rename(part.c_str(), final_path.c_str()) != 0) {
      failed = Step::kRename;
      err = errno;
    }
  }
  mark(Step::kDone);
  if (err) {
    if (cleanup) ::unlink(part.c_str());
    return fail(failed, err);
  }
  r.step = Step::kDone;
  return r;
}

// What a read of a whole block gave: the bytes received before the end or the error.
struct ReadOutcome {
  int err = 0;  // 0: read to the end; else the errno of open() or read()
  bool at_open = false;
  Bytes got;
};

inline ReadOutcome ReadWhole(const std::string& path, size_t buf_size = 1 << 16) {
  ReadOutcome r;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    r.err = errno;
    r.at_open = true;
    return r;
  }
  std::vector<uint8_t> buf(buf_size);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.err = errno;
      break;
    }
    if (n == 0) break;
    r.got.insert(r.got.end(), buf.data(), buf.data() + n);
  }
  ::close(fd);
  return r;
}

// Bytes of `got` that differ from `want` (including any beyond its end): the "wrong bytes".
inline size_t WrongBytes(const Bytes& got, const Bytes& want) {
  size_t wrong = got.size() > want.size() ? got.size() - want.size() : 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) wrong += got[i] != want[i];
  return wrong;
}

inline nlohmann::json ControlJson(const MountedFs& m, const std::string& request) {
  return nlohmann::json::parse(Control(m, request), nullptr, false);
}

// One counter of a tenant from the status request (as the admin, root).
inline uint64_t Counter(const MountedFs& m, const std::string& name,
                        const std::string& tenant = "acme") {
  nlohmann::json j = ControlJson(m, R"({"op":"status"})");
  REQUIRE_MESSAGE(j.is_object(), "status reply is not JSON");
  REQUIRE(j.value("ok", false));
  return j["tenants"][tenant][name].get<uint64_t>();
}

// "hit", "prefix_hit" or "miss" from the lookup request.
inline std::string LookupResultOf(const MountedFs& m, const CacheIdentity& id) {
  nlohmann::json j = ControlJson(
      m, "{\"op\":\"lookup\",\"identity\":\"" + HexEncode(EncodePhysicalKey(id)) + "\"}");
  if (!j.is_object() || !j.value("ok", false)) return "error";
  return j.value("result", "");
}

inline int StatErrno(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

// Polls until stat(path) is ENOENT (the daemon invalidates kernel entries from a thread of
// its own, so a removal shows up a moment later). Returns the last errno seen.
inline int WaitForMiss(const std::string& path,
                       std::chrono::milliseconds limit = std::chrono::seconds(2)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int e = StatErrno(path);
  while (e != ENOENT && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    e = StatErrno(path);
  }
  return e;
}

// Regular files under `dir`, recursively, as paths relative to it.
inline std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec))
      out.push_back(std::filesystem::relative(it->path(), dir, ec).string());
  }
  return out;
}

// Entries of a directory through the mount (names only).
inline std::vector<std::string> ListMounted(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

// The backing file of a committed block in a single-directory data dir.
inline std::string BackingPath(const MountedFs& m, const CacheIdentity& id) {
  return m.data() + "/blocks/" + AddressOf(id).RelativePath();
}

inline Bytes ReadFileBytes(const std::string& path) {
  Bytes out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st;
  ::fstat(fd, &st);
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  ::close(fd);
  return out;
}

inline bool WriteFileBytes(const std::string& path, std::span<const uint8_t> bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size());
  ::close(fd);
  return ok;
}

using Clock = std::chrono::steady_clock;
inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace gpucache::test
