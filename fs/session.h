// Mounting and serving: the FUSE session's life from mount to clean unmount.
#pragma once

#include <string>

#include "fs/filesystem.h"

namespace gpucache {

struct MountOptions {
  std::string mountpoint;
  bool foreground = false;   // -f: stay in the foreground (systemd, tests)
  bool debug = false;        // -d: libfuse request tracing (implies foreground)
  std::string fuse_options;  // -o list passed through to libfuse, after gpucache's defaults
};

// Mounts, serves until SIGINT/SIGTERM/SIGHUP or an unmount, then unmounts. Returns an exit code.
int RunMount(Filesystem& fs, const MountOptions& options);

}  // namespace gpucache
