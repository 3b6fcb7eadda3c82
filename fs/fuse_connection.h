// The daemon's FUSE connection as /sys/fs/fuse/connections numbers it (its mount's device
// minor), and what ends it when the daemon cannot. A daemon killed while one of its threads
// waited in the kernel for a directory's lock (an entry invalidation, under a request that
// holds the lock and that no thread is left to answer) cannot exit: that thread keeps
// /dev/fuse open, so the connection stays, every access to the mount hangs, and a new daemon
// cannot start there. Aborting the connection ends it (docs/reliability.md, "A daemon that
// cannot exit"). The daemon records its pid per connection so that
// packaging/gpucache-unmount-stale aborts a hung connection only when its daemon is gone.
#pragma once

#include <optional>
#include <string>

namespace gpucache {

struct FuseConnection {
  unsigned minor = 0;

  // The gpucachefs mount at `mountpoint` (absolute) in <proc>/self/mountinfo: the last one, on
  // top. No FUSE request: safe from a thread of the daemon serving it.
  static std::optional<FuseConnection> Find(const std::string& mountpoint,
                                            const std::string& proc = "/proc");
  // Writes 1 to <sysfs>/fs/fuse/connections/<minor>/abort: every request waiting fails
  // (ECONNABORTED; later ones ENOTCONN), and the connection ends.
  bool Abort(const std::string& sysfs = "/sys") const;
  // /run/gpucache/connection-<minor>, holding `pid`; false (logged by the caller) if it
  // cannot be written. Forget removes it.
  bool Record(int pid, const std::string& run_dir = "/run/gpucache") const;
  // Removes the record; with `pid`, only if it is that daemon's.
  void Forget(int pid = 0, const std::string& run_dir = "/run/gpucache") const;
};

}  // namespace gpucache
