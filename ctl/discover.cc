#include "ctl/discover.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/mount_escape.h"

namespace gpucache::ctl {
namespace {

namespace fs = std::filesystem;

std::string ReadLine(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

struct Mount {
  std::string majmin;      // "8:1"; btrfs and other virtual devices show 0:N
  std::string source;      // "/dev/sda1", "/dev/mapper/vg-root", "/dev/root"
  std::string mountpoint;
  std::string fstype;      // "ext4", "fuse.gpucachefs"
};

// mountinfo: "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
std::vector<Mount> Mounts(const std::string& proc) {
  std::vector<Mount> out;
  std::ifstream in(proc + "/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, root;
    Mount m;
    f >> id >> parent >> m.majmin >> root >> m.mountpoint;
    std::string tok;
    while (f >> tok && tok != "-") {
    }
    f >> m.fstype >> m.source;
    m.mountpoint = UnescapeMountField(m.mountpoint);
    out.push_back(std::move(m));
  }
  return out;
}

// Entries of a sysfs directory of links (holders/, slaves/): the device names.
std::vector<std::string> Links(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  return out;
}

struct Scanned {
  BlockDevice device;
  std::string majmin;               // from sysfs "dev"
  std::vector<std::string> slaves;  // what a dm or md device is built from
};

// The device of a mount: by major:minor through sysfs (a mount source such as
// /dev/mapper/vg-root or /dev/root names no sysfs entry), else by the source's name.
Scanned* DeviceOf(const Mount& m, std::vector<Scanned>& devices) {
  for (Scanned& s : devices) {
    if (!s.majmin.empty() && s.majmin == m.majmin) return &s;
  }
  if (m.source.rfind("/dev/", 0) != 0) return nullptr;
  for (Scanned& s : devices) {
    if (s.device.name == m.source.substr(5)) return &s;
  }
  return nullptr;
}

// The device holding / and everything it rests on: its partition's disk, the members of a dm
// or md device (recursively), and their disks. Name -> why it is excluded.
std::map<std::string, std::string> SystemDevices(const std::string& root,
                                                 const std::vector<Scanned>& devices) {
  std::map<std::string, std::string> out;
  auto find = [&](const std::string& name) -> const Scanned* {
    for (const Scanned& s : devices) {
      if (s.device.name == name) return &s;
    }
    return nullptr;
  };
  std::vector<std::pair<std::string, std::string>> todo = {{root, "holds /"}};
  while (!todo.empty()) {
    auto [name, reason] = todo.back();
    todo.pop_back();
    const Scanned* s = find(name);
    if (!s || !out.emplace(name, reason).second) continue;
    if (!s->device.parent.empty()) todo.emplace_back(s->device.parent, "parent of the device holding /");
    for (const std::string& slave : s->slaves) todo.emplace_back(slave, "part of the device holding /");
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
  fs::path cls = fs::path(roots.sysfs) / "class" / "block";
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(cls, ec)) entries.push_back(entry.path());
  std::vector<Scanned> devices;
  for (const fs::path& path : entries) {
    if (on_device) on_device(devices.size(), entries.size());
    Scanned s;
    BlockDevice& d = s.device;
    d.name = path.filename().string();
    fs::path real = fs::canonical(path, ec);
    if (ec) real = path;
    if (fs::exists(real / "partition")) d.parent = real.parent_path().filename().string();
    d.bytes = std::strtoull(ReadLine(real / "size").c_str(), nullptr, 10) * 512;
    s.majmin = ReadLine(real / "dev");
    s.slaves = Links(real / "slaves");
    d.filesystem = DetectFilesystem(roots.dev + "/" + d.name);
    if (!Links(real / "holders").empty()) d.reason = "in use by another device (holders)";
    devices.push_back(std::move(s));
  }
  std::string root;
  for (const Mount& m : Mounts(roots.proc)) {
    Scanned* s = DeviceOf(m, devices);
    if (!s) continue;
    if (m.mountpoint == "/") root = s->device.name;
    if (s->device.mountpoint.empty()) s->device.mountpoint = m.mountpoint;  // the first seen
  }
  std::map<std::string, std::string> system = SystemDevices(root, devices);
  std::vector<BlockDevice> out;
  for (Scanned& s : devices) {
    BlockDevice& d = s.device;
    if (auto it = system.find(d.name); it != system.end()) {
      d.reason = it->second;
    } else if (!d.mountpoint.empty()) {
      d.reason = "mounted at " + d.mountpoint;
      if (d.name.rfind("nvme", 0) == 0) d.suggested_dir = d.mountpoint + "/gpucache";
    } else if (d.reason.empty()) {
      bool has_partitions = false;
      for (const Scanned& p : devices) has_partitions |= p.device.parent == d.name;
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

std::optional<MountedPath> FindGpucacheMount(const std::string& path, const std::string& proc) {
  if (path.empty()) return std::nullopt;
  std::error_code ec;
  fs::path lexical = fs::absolute(path, ec);
  if (ec) return std::nullopt;
  lexical = lexical.lexically_normal();
  // Symlinks resolved where the path can be walked; a stale mount cannot (ENOTCONN).
  std::vector<std::string> candidates;
  fs::path real = fs::weakly_canonical(lexical, ec);
  if (!ec) candidates.push_back(real.string());
  candidates.push_back(lexical.string());
  std::vector<Mount> mounts = Mounts(proc);
  for (std::string c : candidates) {
    while (c.size() > 1 && c.back() == '/') c.pop_back();
    // The deepest mount holding c; of several at one mountpoint, the last (the one on top).
    const Mount* holder = nullptr;
    for (const Mount& m : mounts) {
      const std::string& mp = m.mountpoint;
      bool holds = c == mp || mp == "/" ||
                   (c.size() > mp.size() && c.starts_with(mp) && c[mp.size()] == '/');
      if (holds && (!holder || mp.size() >= holder->mountpoint.size())) holder = &m;
    }
    if (!holder || holder->fstype != "fuse.gpucachefs") continue;
    const std::string& mp = holder->mountpoint;
    std::string inside = c.size() > mp.size() ? c.substr(mp == "/" ? 1 : mp.size() + 1) : "";
    return MountedPath{mp, inside, holder->majmin};
  }
  return std::nullopt;
}

}  // namespace gpucache::ctl
