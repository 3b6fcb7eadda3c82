#include "fs/ram_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpucache {
namespace {

constexpr unsigned long kFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;

std::string Why(const std::string& what, int err) {
  return what + ": " + strerrorname_np(err) + " (" + strerror(err) + ")" +
         (err == EPERM ? "; mounting needs root (CAP_SYS_ADMIN)" : "");
}

// Mounts the tmpfs at `path`; without huge pages if this kernel's tmpfs has none.
bool MountTmpfs(const std::string& path, uint64_t bytes, std::string* why) {
  const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
  if (::mount("gpucache-ram", path.c_str(), "tmpfs", kFlags, (opts + ",huge=within_size").c_str()) == 0) {
    return true;
  }
  if (errno == EINVAL &&
      ::mount("gpucache-ram", path.c_str(), "tmpfs", kFlags, opts.c_str()) == 0) {
    return true;
  }
  *why = Why("cannot mount a tmpfs at " + path, errno);
  return false;
}

}  // namespace

Fd MountRamDir(uint64_t bytes, std::string* why, const std::string& base) {
  if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
    *why = Why("cannot make " + base, errno);
    return Fd();
  }
  const std::string path = base + "/ram-" + std::to_string(::getpid());
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = Why("cannot make " + path, errno);
    return Fd();
  }
  Fd dir;
  if (MountTmpfs(path, bytes, why)) {
    dir = Fd(::open(path.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!dir.valid()) *why = Why("cannot open " + path, errno);
    // Reachable through `dir` alone from here on; freed by the kernel when it closes.
    ::umount2(path.c_str(), MNT_DETACH);
  }
  ::rmdir(path.c_str());
  return dir;
}

}  // namespace gpucache
