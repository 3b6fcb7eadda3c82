// Mounting and serving: the FUSE session's life from mount to clean unmount.
#pragma once

#include <functional>
#include <string>

#include "fs/filesystem.h"

namespace gpucache {

struct MountOptions {
  std::string mountpoint;
  bool foreground = false;   // -f: stay in the foreground (systemd, tests)
  bool debug = false;        // -d: libfuse request tracing (implies foreground)
  std::string fuse_options;  // -o list passed through to libfuse, after gpucache's defaults
  // Runs once mounted (after detaching, so threads it starts survive), before READY=1; false
  // unmounts and fails start-up.
  std::function<bool()> on_mounted;
};

// True if libfuse takes the mount options (gpucache's and the -o list), else false with why in
// `error`. Nothing is mounted: start-up asks before it touches a data directory.
bool CheckMountOptions(const MountOptions& options, bool kernel_permissions, std::string* error);

// Mounts, serves until SIGINT/SIGTERM or an unmount, then unmounts (gpucachefs turns SIGHUP
// into a reload in on_mounted). Returns an exit code.
int RunMount(Filesystem& fs, const MountOptions& options);

}  // namespace gpucache
