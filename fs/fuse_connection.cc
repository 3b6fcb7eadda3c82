#include "fs/fuse_connection.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/mount_escape.h"

namespace gpucache {
namespace {

bool WriteAll(const std::string& path, const std::string& text, int flags) {
  int fd = ::open(path.c_str(), flags | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  return ::close(fd) == 0 && ok;
}

}  // namespace

std::optional<FuseConnection> FuseConnection::Find(const std::string& mountpoint, const std::string& proc) {
  std::ifstream in(proc + "/self/mountinfo");
  std::optional<FuseConnection> found;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, majmin, root, point;
    f >> id >> parent >> majmin >> root >> point;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos || UnescapeMountField(point) != mountpoint) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    size_t colon = majmin.find(':');
    if (fstype != "fuse.gpucachefs" || colon == std::string::npos) continue;
    try {
      found = FuseConnection{static_cast<unsigned>(std::stoul(majmin.substr(colon + 1)))};
    } catch (const std::exception&) {
      continue;
    }
  }
  return found;
}

bool FuseConnection::Abort(const std::string& sysfs) const {
  return WriteAll(sysfs + "/fs/fuse/connections/" + std::to_string(minor) + "/abort", "1\n", 0);
}

bool FuseConnection::Record(int pid, const std::string& run_dir) const {
  ::mkdir(run_dir.c_str(), 0700);  // EEXIST is fine
  return WriteAll(run_dir + "/connection-" + std::to_string(minor), std::to_string(pid) + "\n",
                  O_CREAT | O_TRUNC);
}

void FuseConnection::Forget(int pid, const std::string& run_dir) const {
  const std::string path = run_dir + "/connection-" + std::to_string(minor);
  if (pid != 0) {
    std::ifstream in(path);
    std::string held;
    std::getline(in, held);
    if (held != std::to_string(pid)) return;  // another daemon's by now
  }
  ::unlink(path.c_str());
}

}  // namespace gpucache
