// Device discovery (gpucachectl discover): which block devices could hold gpucache data.
//
// Reads sysfs (/sys/class/block), the mount table (/proc/self/mountinfo) and, read-only, the
// first 256 KiB of each device for filesystem signatures. It never writes anywhere. Excluded:
// the device holding / (found by major:minor, so /dev/root and /dev/mapper/vg-root count), what
// it is built from (the slaves of a dm or md device, recursively) and their disks; devices with
// holders (LVM, MD, dm-crypt); and mounted devices (a mounted NVMe filesystem gets a suggested
// data directory instead).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gpucache::ctl {

struct DiscoverRoots {
  std::string sysfs = "/sys";
  std::string proc = "/proc";
  std::string dev = "/dev";
};

struct BlockDevice {
  std::string name;           // e.g. nvme0n1p1
  std::string parent;         // whole-disk device for a partition, else empty
  uint64_t bytes = 0;
  std::string filesystem;     // ext4, xfs, btrfs, zfs, or empty
  std::string mountpoint;     // where it is mounted, if it is
  bool candidate = false;     // usable for a new data directory (after formatting)
  std::string reason;         // why it is or is not a candidate
  std::string suggested_dir;  // for a mounted NVMe filesystem: <mountpoint>/gpucache
};

// `on_device` is called once per device scanned (progress reporting).
std::vector<BlockDevice> Discover(const DiscoverRoots& roots,
                                  const std::function<void(size_t done, size_t total)>& on_device = {});

// Where a path is in a gpucachefs mount (fstype fuse.gpucachefs in <proc>/self/mountinfo, the
// deepest mount holding the path): the mountpoint, and the rest of the path below it ("" for the
// mountpoint itself). `path` may be relative to the current directory and may go through
// symlinks; a stale mount (ENOTCONN) is matched by the path as written. nullopt when the mount
// holding `path` is not a gpucachefs mount.
struct MountedPath {
  std::string mountpoint;
  std::string inside;  // "acme/ns", no leading or trailing slash
  std::string majmin;  // the mount's device, "0:53" (st_dev of every file in it)
};
std::optional<MountedPath> FindGpucacheMount(const std::string& path,
                                             const std::string& proc = "/proc");

// Signature at the start of a device image (256 KiB or less); empty when none is known.
std::string DetectFilesystem(const std::string& device_path);

}  // namespace gpucache::ctl
