#include "ctl/discover.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace gpucache::ctl {
namespace {

namespace fs = std::filesystem;

std::string ReadLine(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

// mountinfo: "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
std::map<std::string, std::string> MountedDevices(const std::string& proc) {
  std::map<std::string, std::string> out;  // device name -> mount point (the first seen)
  std::ifstream in(proc + "/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, majmin, root, mountpoint;
    f >> id >> parent >> majmin >> root >> mountpoint;
    std::string tok;
    while (f >> tok && tok != "-") {
    }
    std::string fstype, source;
    f >> fstype >> source;
    if (source.rfind("/dev/", 0) != 0) continue;
    out.try_emplace(source.substr(5), mountpoint);
  }
  return out;
}

}  // namespace

std::string DetectFilesystem(const std::string& device_path) {
  int fd = ::open(device_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::vector<unsigned char> b(256 * 1024, 0);
  ssize_t n = ::pread(fd, b.data(), b.size(), 0);
  ::close(fd);
  if (n <= 0) return "";
  auto at = [&](size_t off, const char* magic, size_t len) {
    return static_cast<size_t>(n) >= off + len && std::memcmp(b.data() + off, magic, len) == 0;
  };
  if (at(0, "XFSB", 4)) return "xfs";
  if (at(1080, "\x53\xEF", 2)) return "ext4";  // ext2/3/4 share the magic 0xEF53
  if (at(0x10040, "_BHRfS_M", 8)) return "btrfs";
  // ZFS: an uberblock (magic 0x00bab10c) at the start of label 0's uberblock ring (128 KiB).
  if (at(128 * 1024, "\x0c\xb1\xba\x00\x00\x00\x00\x00", 8) ||
      at(128 * 1024, "\x00\x00\x00\x00\x00\xba\xb1\x0c", 8)) {
    return "zfs";
  }
  return "";
}

std::vector<BlockDevice> Discover(const DiscoverRoots& roots,
                                  const std::function<void(size_t, size_t)>& on_device) {
  std::vector<BlockDevice> out;
  fs::path cls = fs::path(roots.sysfs) / "class" / "block";
  std::error_code ec;
  std::map<std::string, std::string> mounted = MountedDevices(roots.proc);
  std::string root_dev;
  for (const auto& [dev, mp] : mounted) {
    if (mp == "/") root_dev = dev;
  }
  std::vector<BlockDevice> devices;
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(cls, ec)) entries.push_back(entry.path());
  for (const fs::path& path : entries) {
    if (on_device) on_device(devices.size(), entries.size());
    BlockDevice d;
    d.name = path.filename().string();
    fs::path real = fs::canonical(path, ec);
    if (ec) real = path;
    if (fs::exists(real / "partition")) d.parent = real.parent_path().filename().string();
    d.bytes = std::strtoull(ReadLine(real / "size").c_str(), nullptr, 10) * 512;
    bool holders = fs::exists(real / "holders") && !fs::is_empty(real / "holders", ec);
    d.filesystem = DetectFilesystem(roots.dev + "/" + d.name);
    if (auto m = mounted.find(d.name); m != mounted.end()) d.mountpoint = m->second;
    if (holders) d.reason = "in use by another device (holders)";
    devices.push_back(std::move(d));
  }
  // The device holding / and every parent of it are never candidates.
  std::set<std::string> system_devices;
  for (std::string cur = root_dev; !cur.empty();) {
    system_devices.insert(cur);
    std::string next;
    for (const BlockDevice& d : devices) {
      if (d.name == cur) next = d.parent;
    }
    cur = next;
  }
  for (BlockDevice& d : devices) {
    if (system_devices.count(d.name)) {
      d.reason = d.name == root_dev ? "holds /" : "parent of the device holding /";
    } else if (!d.mountpoint.empty()) {
      d.reason = "mounted at " + d.mountpoint;
      if (d.name.rfind("nvme", 0) == 0) d.suggested_dir = d.mountpoint + "/gpucache";
    } else if (d.reason.empty()) {
      bool has_partitions = false;
      for (const BlockDevice& p : devices) has_partitions |= p.parent == d.name;
      if (has_partitions) {
        d.reason = "has partitions (look at those)";
      } else if (d.bytes == 0) {
        d.reason = "empty (no media)";
      } else {
        d.candidate = true;
        d.reason = d.filesystem.empty() ? "unused, no filesystem" : "unused, " + d.filesystem +
                                                                        " signature (not mounted)";
      }
    }
    out.push_back(d);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

}  // namespace gpucache::ctl
