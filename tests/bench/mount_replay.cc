#include "tests/bench/mount_replay.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

#include "clients/cpp/mount_client.h"

namespace gpucache::replay {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

bool Mounted(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == kFuseSuperMagic;
}

bool ReadAll(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[1 << 16];
  while (std::fread(buf, 1, sizeof buf, f) > 0) {
  }
  bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}

// A reader's close returns before the kernel sends the daemon its RELEASE, and a block still
// open is not evictable: without this wait a commit right after a read could find the block
// just read still open and evict another one instead, so the replay through the mount decided
// unlike the one in process (seldom, and mostly under "oldest", which never moves a block that
// was read to the back). Waits until the daemon counts no handle on the block (at most 10 s);
// false, with what went wrong in `error`, if it does not.
bool AwaitReleased(const std::string& path, std::string& error) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char value[32];
  for (;;) {
    ssize_t n = ::getxattr(path.c_str(), "user.gpucache.open_handles", value, sizeof value - 1);
    if (n < 0) {
      error = "getxattr open_handles of " + path + ": " + std::strerror(errno);
      return false;
    }
    if (std::string_view(value, static_cast<size_t>(n)) == "0") return true;
    if (std::chrono::steady_clock::now() > deadline) {
      error = path + " still open in the daemon 10 s after it was read and closed";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace

MountResult ReplayThroughMount(const std::vector<Request>& trace, const std::string& policy,
                               uint64_t capacity_blocks, uint64_t block_bytes,
                               const std::string& mountpoint, const std::string& self_path) {
  MountResult result;
  namespace fs = std::filesystem;
  std::string daemon = (fs::path(self_path).parent_path() / "gpucachefs").string();
  char tmpl[] = "/tmp/gpucache-replay-XXXXXX";
  std::string scratch = ::mkdtemp(tmpl);
  std::string config = scratch + "/replay.toml";
  std::ofstream(config) << "data_dir = \"" << scratch << "/data\"\n"
                        << "[metrics]\nlisten = \"\"\n"
                        << "[limits]\neviction_policy = \"" << policy << "\"\n"
                        << "[tenants.replay]\nuids = [" << ::getuid() << "]\n"
                        << "max_retained_bytes = " << capacity_blocks * block_bytes << "\n";
  fs::create_directories(mountpoint);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(daemon.c_str(), "gpucachefs", config.c_str(), mountpoint.c_str(), "-f", nullptr);
    ::_exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!Mounted(mountpoint) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!Mounted(mountpoint)) {
    result.error = "gpucachefs (" + daemon + ") did not mount at " + mountpoint;
  } else {
    MountClient client(mountpoint);
    Bytes payload(block_bytes, 0x5a);
    result.ok = true;
    for (const Request& r : trace) {
      result.score.input_tokens += r.input_length;
      bool leading = true;
      for (size_t i = 0; i < r.blocks.size(); ++i) {
        CacheIdentity id = ReplayIdentity(r, i);
        std::string path = client.PathOf(id);
        struct stat st;
        bool present = ::stat(path.c_str(), &st) == 0 && ReadAll(path);
        if (present && !AwaitReleased(path, result.error)) {
          result.ok = false;
          break;
        }
        if (present && leading) result.score.hit_tokens += TokensInBlock(r, i);
        leading = leading && present;
        if (present) continue;
        int err = client.Commit(id, payload);
        // Refused room (its chain fills the quota): not cached, as in the in-process replay.
        if (err == EDQUOT) continue;
        if (err != 0 && err != EEXIST) {
          result.ok = false;
          result.error = "commit failed: " + std::string(std::strerror(err));
          break;
        }
      }
      if (!result.ok) break;
    }
  }
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  if (Mounted(mountpoint)) (void)std::system(("fusermount3 -u -z " + mountpoint).c_str());
  std::error_code ec;
  fs::remove_all(scratch, ec);
  return result;
}

}  // namespace gpucache::replay
