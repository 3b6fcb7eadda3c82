// The RAM tier's directory: a tmpfs of the tier's size that only the daemon can reach
// (adr/0020).
//
// It is mounted at /run/gpucache/ram-<pid> (mode 0700, `size=<bytes>,huge=within_size`), opened,
// and at once detached (umount2 MNT_DETACH) and its mountpoint removed: from then on it is
// reachable only through the daemon's descriptors, and the kernel frees it when the last of them
// closes, however the daemon ends (SIGKILL included). Nothing is left to clean up at the next
// start, and a restart starts the tier empty.
#pragma once

#include <cstdint>
#include <string>

#include "store/posix_io.h"

namespace gpucache {

// The directory, or an invalid Fd with `why` saying what failed (not root, no tmpfs, ...).
// `base`: where the short-lived mountpoint is made.
Fd MountRamDir(uint64_t bytes, std::string* why, const std::string& base = "/run/gpucache");

}  // namespace gpucache
