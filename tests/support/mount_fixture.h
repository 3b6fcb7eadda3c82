// A real gpucachefs mount for tests: a scratch data directory and mountpoint, the daemon
// started in the foreground, and everything killed and unmounted when the fixture ends, even
// when a check failed half-way.
#pragma once

#include <functional>
#include <string>
#include <vector>
#include <sys/types.h>

#include "tests/support/temp_dir.h"

namespace gpucache::test {

// The test configuration without its data_dir: tenants acme = uids {0, 1000} and globex =
// uid 2000, admins uid 0. The strings are added to the [limits], [tenants.acme] and
// [tenants.globex] tables.
std::string TestConfig(const std::string& limits = "", const std::string& acme = "",
                       const std::string& globex = "");

class MountedFs {
 public:
  explicit MountedFs(const std::string& config_body = TestConfig());
  // The daemon started through `launcher` (a command that execs its arguments, such as
  // {"prlimit", "--nofile=64:4096", "--"}).
  MountedFs(const std::string& config_body, std::vector<std::string> launcher);
  ~MountedFs();
  MountedFs(const MountedFs&) = delete;
  MountedFs& operator=(const MountedFs&) = delete;

  const std::string& mnt() const { return mnt_; }
  const std::string& data() const { return data_; }
  std::string scratch() const { return tmp_.path(); }
  const std::string& config() const { return config_; }
  std::string Log() const;

  void Start();
  int Stop();  // SIGTERM, as systemd or Ctrl-C would; returns the daemon's exit status
  // Waits (10 s at most) for the daemon to exit by itself, e.g. after fusermount3 -u; returns
  // its exit status, or -1 (and kills it) if it did not exit.
  int WaitForExit();
  void Kill();  // SIGKILL, then lazily unmount the dead mount
  bool Mounted() const;
  pid_t pid() const { return pid_; }

 private:
  MountedFs(const std::string& config_body, int unstarted);  // writes the config, does not start
  TempDir tmp_;
  std::string mnt_, data_, config_, log_;
  std::vector<std::string> launcher_;
  pid_t pid_ = -1;
};

// Runs `fn` in a child process with the given uid/gid (and no supplementary groups); returns
// what fn returned (an errno, 0 for success) or 255 if the child died.
int AsUser(uid_t uid, gid_t gid, const std::function<int()>& fn);
// The same with these supplementary groups.
int AsUser(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, const std::function<int()>& fn);

// errno of a syscall-like expression: 0 if it returned >= 0, errno otherwise.
int Errno(long rc);

}  // namespace gpucache::test
