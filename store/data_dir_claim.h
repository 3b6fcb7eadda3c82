// Which directories gpucache may take as a data directory (adr/0017). A start deletes what it
// finds in a data directory's tmp/ and spare/, and writes LOCK, EPOCH and INDEX at its top: done
// in the wrong directory (`data_dir = "/"`), that deletes host files. So a data directory is one
// gpucache made: it carries a format marker written at its first start into an empty (or new)
// directory, and a directory that is not empty and has no marker is refused, as are "/", the
// system's own directories and anything under /proc, /sys or /dev.
#pragma once

#include <string>
#include <vector>

namespace gpucache {

// The marker at the top of every data directory; its first line is kDataDirMarkerText's.
inline constexpr char kDataDirMarker[] = "GPUCACHE-DATA";
inline constexpr char kDataDirMarkerText[] = "gpucache data directory, format 1\n";

// Why `dir` may not be a data directory, or empty if it may (it is one, it is empty, or it does
// not exist yet). Reads only; creates nothing. The message says how to fix it.
std::string DataDirRefusal(const std::string& dir);
// Why the daemon should not create `dir`, missing, or empty if it may: it would be made under a
// mount point `fstab` names that `mounts` (the mounts now) does not hold, on the filesystem
// below it.
std::string UnmountedParentRefusal(const std::string& dir, const std::string& fstab = "/etc/fstab",
                                   const std::string& mounts = "/proc/self/mounts");

// Why a data directory and the mountpoint cannot be used together (one inside the other, or
// the same), or empty.
std::string MountpointClash(const std::string& dir, const std::string& mountpoint);

// Why `mountpoint` may not be mounted on because it is, or is inside, a data directory of any
// gpucache (a directory holding the marker), or empty. A mount there hides that directory's
// files from the daemon that owns it, which then takes its blocks for deleted (found by review,
// 2026-12-07: a second daemon mounted on a running one's data directory). Reads only. Run it
// before the mount is made (through a live mount it asks that mount).
std::string MountpointInDataDir(const std::string& mountpoint);

// Why these data directories cannot be used together (two names of one directory, through a
// link or a trailing '/', or one inside another), or empty.
std::string DataDirsOverlap(const std::vector<std::string>& dirs);
// A warning when two data directories are on one filesystem (each judged by itself, or by its
// nearest existing ancestor when it is still to be made); "" when each has one of its own.
// Placement weighs each directory by its filesystem's free bytes, so that filesystem would
// count twice, and `isolate` of one would leave the other on the same failed device.
std::string DataDirsSharingFilesystem(const std::vector<std::string>& dirs);

// Makes `dir` a data directory or confirms it is one: creates it if missing (mode 0700), writes
// the marker into an empty one, adopts a directory an older gpucache made (every entry one that
// gpucache writes, EPOCH among them). `canonical` gets the path with its links resolved: the
// store then opens nothing below it through a link. False with `error` if refused.
bool ClaimDataDir(const std::string& dir, std::string* canonical, std::string* error);

}  // namespace gpucache
