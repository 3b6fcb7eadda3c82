// Device discovery against a fake sysfs/proc/dev tree.
#include "ctl/discover.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "tests/support/temp_dir.h"

namespace gpucache::ctl {
namespace {

namespace fs = std::filesystem;

class FakeMachine {
 public:
  FakeMachine() {
    fs::create_directories(root() + "/sys/class/block");
    fs::create_directories(root() + "/proc/self");
    fs::create_directories(root() + "/dev");
  }
  std::string root() const { return tmp_.path(); }
  DiscoverRoots roots() const { return {root() + "/sys", root() + "/proc", root() + "/dev"}; }

  // A disk (or, with `parent`, a partition of it) of `gib` GiB, optionally with holders.
  void Device(const std::string& name, uint64_t gib, const std::string& parent = "",
              bool holders = false) {
    std::string real = root() + "/sys/devices/pci0/" + (parent.empty() ? name : parent + "/" + name);
    fs::create_directories(real + "/holders");
    std::ofstream(real + "/size") << gib * 1024 * 1024 * 2 << "\n";  // 512-byte sectors
    if (!parent.empty()) std::ofstream(real + "/partition") << "1\n";
    if (holders) std::ofstream(real + "/holders/dm-0") << "";
    fs::create_symlink(real, root() + "/sys/class/block/" + name);
    std::ofstream(root() + "/dev/" + name);  // an empty device node stand-in
  }
  void Signature(const std::string& name, size_t offset, const std::string& magic) {
    std::fstream f(root() + "/dev/" + name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(magic.data(), static_cast<std::streamsize>(magic.size()));
  }
  void Mount(const std::string& dev, const std::string& mountpoint, const std::string& type) {
    std::ofstream(root() + "/proc/self/mountinfo", std::ios::app)
        << "30 1 8:1 / " << mountpoint << " rw,relatime - " << type << " /dev/" << dev << " rw\n";
  }

 private:
  test::TempDir tmp_;
};

std::map<std::string, BlockDevice> ByName(const std::vector<BlockDevice>& list) {
  std::map<std::string, BlockDevice> m;
  for (const auto& d : list) m[d.name] = d;
  return m;
}

TEST_CASE("Discover: excludes the root device and its parents, holders and mounted devices") {
  FakeMachine m;
  m.Device("sda", 100);
  m.Device("sda1", 100, "sda");
  m.Device("nvme0n1", 1000);                  // free, blank
  m.Device("nvme1n1", 2000);                  // mounted xfs: suggest a data dir
  m.Device("nvme2n1", 500, "", /*holders=*/true);
  m.Device("nvme3n1", 800);                   // free, with an ext4 signature
  m.Device("sdb", 50);                        // btrfs
  m.Device("sdc", 50);                        // zfs
  m.Signature("nvme1n1", 0, "XFSB");
  m.Signature("nvme3n1", 1080, std::string("\x53\xEF", 2));
  m.Signature("sdb", 0x10040, "_BHRfS_M");
  m.Signature("sdc", 128 * 1024, std::string("\x0c\xb1\xba\x00\x00\x00\x00\x00", 8));
  m.Mount("sda1", "/", "ext4");
  m.Mount("nvme1n1", "/srv/nvme1", "xfs");

  auto d = ByName(Discover(m.roots()));
  REQUIRE(d.size() == 8);
  CHECK_FALSE(d["sda1"].candidate);
  CHECK(d["sda1"].reason == "holds /");
  CHECK(d["sda1"].parent == "sda");
  CHECK_FALSE(d["sda"].candidate);
  CHECK(d["sda"].reason == "parent of the device holding /");
  CHECK(d["nvme0n1"].candidate);
  CHECK(d["nvme0n1"].bytes == 1000ull << 30);
  CHECK(d["nvme0n1"].filesystem.empty());
  CHECK_FALSE(d["nvme1n1"].candidate);
  CHECK(d["nvme1n1"].filesystem == "xfs");
  CHECK(d["nvme1n1"].suggested_dir == "/srv/nvme1/gpucache");
  CHECK_FALSE(d["nvme2n1"].candidate);
  CHECK(d["nvme2n1"].reason.find("holders") != std::string::npos);
  CHECK(d["nvme3n1"].candidate);
  CHECK(d["nvme3n1"].filesystem == "ext4");
  CHECK(d["sdb"].filesystem == "btrfs");
  CHECK(d["sdc"].filesystem == "zfs");
}

TEST_CASE("Discover: never writes to a device") {
  FakeMachine m;
  m.Device("nvme0n1", 10);
  m.Signature("nvme0n1", 0, "XFSB");
  std::string node = m.root() + "/dev/nvme0n1";
  ::chmod(node.c_str(), 0444);  // a write attempt would fail loudly; reading must still work
  auto before = fs::last_write_time(node);
  auto d = Discover(m.roots());
  REQUIRE(d.size() == 1);
  CHECK(d[0].filesystem == "xfs");
  CHECK(fs::last_write_time(node) == before);
}

}  // namespace
}  // namespace gpucache::ctl
