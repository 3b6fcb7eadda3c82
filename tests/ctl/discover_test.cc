// Device discovery against a fake sysfs/proc/dev tree.
#include "ctl/discover.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
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

  // A disk (or, with `parent`, a partition of it) of `gib` GiB, optionally with holders and a
  // major:minor (sysfs "dev").
  void Device(const std::string& name, uint64_t gib, const std::string& parent = "",
              bool holders = false, const std::string& majmin = "") {
    std::string real = root() + (name.rfind("dm-", 0) == 0 || name.rfind("md", 0) == 0
                                     ? "/sys/devices/virtual/block/" + name
                                     : "/sys/devices/pci0/" + (parent.empty() ? name : parent + "/" + name));
    fs::create_directories(real + "/holders");
    fs::create_directories(real + "/slaves");
    std::ofstream(real + "/size") << gib * 1024 * 1024 * 2 << "\n";  // 512-byte sectors
    if (!parent.empty()) std::ofstream(real + "/partition") << "1\n";
    if (holders) std::ofstream(real + "/holders/dm-0") << "";
    if (!majmin.empty()) std::ofstream(real + "/dev") << majmin << "\n";
    majmin_[name] = majmin.empty() ? "8:1" : majmin;
    real_[name] = real;
    fs::create_symlink(real, root() + "/sys/class/block/" + name);
    std::ofstream(root() + "/dev/" + name);  // an empty device node stand-in
  }
  // `top` (a dm or md device) is built from `member`: links both ways, as the kernel makes.
  void BuiltFrom(const std::string& top, const std::string& member) {
    fs::create_symlink(real_.at(member), real_.at(top) + "/slaves/" + member);
    fs::create_symlink(real_.at(top), real_.at(member) + "/holders/" + top);
  }
  // A mount whose source is named `source` (not necessarily the sysfs name).
  void MountAs(const std::string& dev, const std::string& source, const std::string& mountpoint) {
    std::ofstream(root() + "/proc/self/mountinfo", std::ios::app)
        << "30 1 " << majmin_.at(dev) << " / " << mountpoint << " rw,relatime - ext4 " << source
        << " rw\n";
  }
  void Signature(const std::string& name, size_t offset, const std::string& magic) {
    std::fstream f(root() + "/dev/" + name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(magic.data(), static_cast<std::streamsize>(magic.size()));
  }
  void Mount(const std::string& dev, const std::string& mountpoint, const std::string& type) {
    std::ofstream(root() + "/proc/self/mountinfo", std::ios::app)
        << "30 1 " << (majmin_.count(dev) ? majmin_[dev] : "8:1") << " / " << mountpoint << " rw,relatime - " << type << " /dev/" << dev << " rw\n";
  }

 private:
  test::TempDir tmp_;
  std::map<std::string, std::string> majmin_, real_;
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

TEST_CASE("Discover: / on LVM (/dev/mapper/vg-root) excludes the dm device, its members and their disks") {
  FakeMachine m;
  m.Device("sda", 100, "", false, "8:0");
  m.Device("sda1", 1, "sda", false, "8:1");          // /boot
  m.Device("sda2", 99, "sda", false, "8:2");         // the LVM physical volume
  m.Device("dm-0", 99, "", false, "254:0");          // vg-root
  m.Device("nvme0n1", 1000, "", false, "259:0");     // free
  m.BuiltFrom("dm-0", "sda2");
  m.MountAs("dm-0", "/dev/mapper/vg-root", "/");     // a name with no sysfs entry
  m.MountAs("sda1", "/dev/sda1", "/boot");
  auto d = ByName(Discover(m.roots()));
  CHECK(d["dm-0"].reason == "holds /");
  CHECK(d["dm-0"].mountpoint == "/");
  CHECK_FALSE(d["dm-0"].candidate);
  CHECK(d["sda2"].reason == "part of the device holding /");
  CHECK(d["sda"].reason == "parent of the device holding /");
  CHECK(d["sda1"].reason == "mounted at /boot");
  CHECK(d["nvme0n1"].candidate);
  for (const auto& [name, dev] : d) CHECK_MESSAGE(dev.candidate == (name == "nvme0n1"), name);
}

TEST_CASE("Discover: / on md RAID1 through /dev/root excludes both mirrors and their disks") {
  FakeMachine m;
  m.Device("nvme0n1", 500, "", false, "259:0");
  m.Device("nvme0n1p1", 500, "nvme0n1", false, "259:1");
  m.Device("nvme1n1", 500, "", false, "259:2");
  m.Device("nvme1n1p1", 500, "nvme1n1", false, "259:3");
  m.Device("md0", 500, "", false, "9:0");
  m.Device("nvme2n1", 2000, "", false, "259:4");     // free
  m.Device("dm-1", 10, "", false, "254:1");          // a dm device built on md0 (holds nothing)
  m.BuiltFrom("md0", "nvme0n1p1");
  m.BuiltFrom("md0", "nvme1n1p1");
  m.MountAs("md0", "/dev/root", "/");                // the kernel's name for root=/dev/md0
  auto d = ByName(Discover(m.roots()));
  CHECK(d["md0"].reason == "holds /");
  CHECK(d["nvme0n1p1"].reason == "part of the device holding /");
  CHECK(d["nvme1n1p1"].reason == "part of the device holding /");
  CHECK(d["nvme0n1"].reason == "parent of the device holding /");
  CHECK(d["nvme1n1"].reason == "parent of the device holding /");
  CHECK(d["nvme2n1"].candidate);
  CHECK(d["dm-1"].candidate);                        // unrelated to /: offered
  CHECK_FALSE(d["md0"].candidate);
}

TEST_CASE("Discover: a mount found by major:minor shows its mount point whatever its source name") {
  FakeMachine m;
  m.Device("nvme0n1", 1000, "", false, "259:0");
  m.Device("sda", 100, "", false, "8:0");
  m.MountAs("sda", "/dev/sda", "/");
  m.MountAs("nvme0n1", "/dev/disk/by-label/fast", "/srv/fast");
  auto d = ByName(Discover(m.roots()));
  CHECK(d["nvme0n1"].mountpoint == "/srv/fast");
  CHECK(d["nvme0n1"].suggested_dir == "/srv/fast/gpucache");
  CHECK_FALSE(d["nvme0n1"].candidate);
}

}  // namespace
}  // namespace gpucache::ctl

namespace gpucache::ctl {
namespace {

TEST_CASE("FindGpucacheMount: the gpucachefs mount holding a path, from mountinfo") {
  FakeMachine m;
  std::ofstream(m.root() + "/proc/self/mountinfo")
      << "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
         "2 1 0:50 / /srv/gpu\\040cache rw,nosuid - fuse.gpucachefs gpucache rw,user_id=0\n"
         "3 2 0:51 / /srv/gpu\\040cache/acme/over rw - tmpfs tmpfs rw\n"
         "4 1 0:52 / /srv/other rw - fuse.sshfs host: rw\n"
         "5 1 0:53 / /nonexistent-gpucache-root/mnt rw - fuse.gpucachefs gpucache rw\n";
  std::string proc = m.root() + "/proc";
  auto at = [&](const std::string& path) { return FindGpucacheMount(path, proc); };
  REQUIRE(at("/srv/gpu cache"));
  CHECK(at("/srv/gpu cache")->mountpoint == "/srv/gpu cache");  // \040 is a space
  CHECK(at("/srv/gpu cache")->inside == "");
  CHECK(at("/srv/gpu cache/")->inside == "");
  REQUIRE(at("/srv/gpu cache/acme/ns//blk"));
  CHECK(at("/srv/gpu cache/acme/ns//blk")->inside == "acme/ns/blk");
  CHECK(at("/srv/gpu cache/acme/x/../ns")->inside == "acme/ns");
  CHECK_FALSE(at("/srv/gpu cache/acme/over/file"));  // a tmpfs mounted over part of it
  CHECK_FALSE(at("/srv/gpu cacheX"));                // not a path below it
  CHECK_FALSE(at("/srv/other/acme"));                // FUSE, but not gpucachefs
  CHECK_FALSE(at("/srv"));
  CHECK_FALSE(at(""));
  REQUIRE(at("/nonexistent-gpucache-root/mnt/acme"));
  CHECK(at("/nonexistent-gpucache-root/mnt/acme")->mountpoint == "/nonexistent-gpucache-root/mnt");
}

TEST_CASE("gpucachectl discover: decimal GB in the table, no progress for a short scan into a pipe") {
  FakeMachine m;
  m.Device("nvme0n1", 1000, "", false, "259:0");  // 1000 GiB = 1073.7 GB
  for (int i = 0; i < 12; ++i) m.Device("loop" + std::to_string(i), 0);
  std::string out = m.root() + "/out", err = m.root() + "/err";
  std::string cmd = std::string(GPUCACHECTL_BIN) + " discover --sysfs " + m.root() + "/sys --proc " +
                    m.root() + "/proc --dev " + m.root() + "/dev >" + out + " 2>" + err;
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream o(out), e(err);
  std::string stdout_text((std::istreambuf_iterator<char>(o)), {}), stderr_text((std::istreambuf_iterator<char>(e)), {});
  CHECK(stdout_text.find("1073.7 GB") != std::string::npos);
  CHECK(stdout_text.find("1073.7G ") == std::string::npos);
  CHECK(stderr_text.empty());  // it used to print ten "scanning block devices" lines
}

}  // namespace
}  // namespace gpucache::ctl
