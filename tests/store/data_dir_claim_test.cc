// Which directories may be a data directory (store/data_dir_claim.h, adr/0017), and how the
// files an operator names (configuration, keyring, credentials) are read: never blocking, only
// a regular file, bounded in size.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/data_dir_claim.h"
#include "store/posix_io.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {
namespace fs = std::filesystem;
bool Refused(const std::string& dir) { return !DataDirRefusal(dir).empty(); }
}  // namespace

TEST_CASE("Data directory: the root, system directories and kernel filesystems are refused") {
  for (const char* dir : {"/", "//", "/var", "/var/", "/tmp", "/var/lib", "/etc", "/usr", "/home",
                          "/mnt", "/srv", "/proc", "/proc/self", "/sys/kernel", "/dev", "/dev/null",
                          "/dev/shm", "/var/tmp/../lib", "relative/path", ""}) {
    CAPTURE(dir);
    CHECK(Refused(dir));
  }
  CHECK(DataDirRefusal("/").find("system directory") != std::string::npos);
  CHECK(DataDirRefusal("/").find("/var/lib/gpucache") != std::string::npos);  // how to fix it
}

TEST_CASE("Data directory: a link to a system directory is refused as what it resolves to") {
  test::TempDir tmp;
  fs::create_directory_symlink("/var", tmp.path() + "/looks-harmless");
  CHECK(DataDirRefusal(tmp.path() + "/looks-harmless").find("resolves to /var") != std::string::npos);
  fs::create_directory_symlink("/", tmp.path() + "/root");
  CHECK(DataDirRefusal(tmp.path() + "/root/tmp").find("resolves to /tmp") != std::string::npos);
  CHECK_FALSE(Refused(tmp.path() + "/root/var/lib/gpucache-not-there-yet"));
}

TEST_CASE("Data directory: new, empty (lost+found allowed), ours or an older gpucache's are taken") {
  test::TempDir tmp;
  CHECK_FALSE(Refused(tmp.path()));
  CHECK_FALSE(Refused(tmp.path() + "/not/there/yet"));
  fs::create_directory(tmp.path() + "/lost+found");
  CHECK_FALSE(Refused(tmp.path()));
  for (const char* name : {"EPOCH", "INDEX", "JOURNAL", "PINS", "LOCK"}) std::ofstream(tmp.path() + "/" + name);
  for (const char* name : {"blocks", "tmp", "spare", "quarantine"}) fs::create_directory(tmp.path() + "/" + name);
  CHECK_FALSE(Refused(tmp.path()));
  std::ofstream(tmp.path() + "/other");
  CHECK(DataDirRefusal(tmp.path()).find("'other'") != std::string::npos);
  std::ofstream(tmp.path() + "/GPUCACHE-DATA") << kDataDirMarkerText;
  CHECK_FALSE(Refused(tmp.path()));  // marked: what else is there is its owner's business
}

// Review (2026-12-07): data_dir = "/mnt/nvme0/gpucache" with /mnt/nvme0 not mounted (an fstab
// entry that failed) was created on the root filesystem, which the cache then filled.
TEST_CASE("Data directory: the daemon creates no missing one under a mount point fstab names that is not mounted") {
  test::TempDir tmp;
  const std::string nvme = tmp.path() + "/nv me0";  // a space: escaped as \040 in fstab
  fs::create_directory(nvme);
  const std::string dir = nvme + "/gpucache";
  const std::string fstab = tmp.path() + "/fstab", mounts = tmp.path() + "/mounts";
  std::string escaped = nvme;
  escaped.replace(escaped.find(' '), 1, "\\040");
  std::ofstream(fstab) << "# comment\n/dev/vda1 / ext4 defaults 0 1\nUUID=x " << escaped << " xfs defaults 0 2\n";
  std::ofstream(mounts) << "/dev/vda1 / ext4 rw 0 0\n";
  const std::string why = UnmountedParentRefusal(dir, fstab, mounts);
  CHECK(why.find("not mounted") != std::string::npos);
  CHECK(why.find(nvme) != std::string::npos);
  CHECK_FALSE(UnmountedParentRefusal(nvme + "/a/b", fstab, mounts).empty());
  // The mount point itself, empty, as data directory: refused too.
  CHECK(UnmountedParentRefusal(nvme, fstab, mounts).find(" is " + nvme + ",") != std::string::npos);
  CHECK(DataDirRefusal(dir).empty());  // the store itself takes it
  // Mounted: taken.
  std::ofstream(mounts, std::ios::app) << "/dev/vdb " << escaped << " xfs rw 0 0\n";
  CHECK(UnmountedParentRefusal(dir, fstab, mounts).empty());
  // Elsewhere, or made by the operator: taken.
  std::ofstream(mounts) << "/dev/vda1 / ext4 rw 0 0\n";
  CHECK(UnmountedParentRefusal(tmp.path() + "/other/gpucache", fstab, mounts).empty());
  // Made empty by the operator, or the mount point itself: still on the filesystem below
  // (review of the diff: an empty directory at the mount point was taken).
  fs::create_directory(dir);
  CHECK_FALSE(UnmountedParentRefusal(dir, fstab, mounts).empty());
  // Marked as the message says: taken.
  std::ofstream(dir + "/" + kDataDirMarker) << kDataDirMarkerText;
  CHECK(UnmountedParentRefusal(dir, fstab, mounts).empty());
  CHECK(DataDirRefusal(dir).empty());
  // Mounts that cannot be read (no /proc): no guess.
  CHECK(UnmountedParentRefusal(nvme + "/new", fstab, tmp.path() + "/no-such-file").empty());
  // The real files: this host's test directory is under no unmounted fstab entry.
  CHECK(UnmountedParentRefusal(tmp.path() + "/new").empty());
}

TEST_CASE("Data directory: a file, a wrong marker or a newer format is refused") {
  test::TempDir tmp;
  std::ofstream(tmp.path() + "/file");
  CHECK(DataDirRefusal(tmp.path() + "/file").find("not a directory") != std::string::npos);
  std::ofstream(tmp.path() + "/GPUCACHE-DATA") << "something else\n";
  CHECK(DataDirRefusal(tmp.path()).find("not gpucache's marker") != std::string::npos);
  std::ofstream(tmp.path() + "/GPUCACHE-DATA") << "gpucache data directory, format 9\n";
  CHECK(DataDirRefusal(tmp.path()).find("newer version") != std::string::npos);
  fs::remove(tmp.path() + "/GPUCACHE-DATA");
  ::mkfifo((tmp.path() + "/GPUCACHE-DATA").c_str(), 0600);
  CHECK(DataDirRefusal(tmp.path()).find("not a regular file") != std::string::npos);
}

TEST_CASE("Data directory: a link at its top is refused") {
  test::TempDir tmp, other;
  std::ofstream(tmp.path() + "/GPUCACHE-DATA") << kDataDirMarkerText;
  fs::create_directory_symlink(other.path(), tmp.path() + "/blocks");
  CHECK(DataDirRefusal(tmp.path()).find("symbolic link") != std::string::npos);
}

TEST_CASE("Data directory: the mountpoint may not be, hold or sit inside a data directory") {
  CHECK(MountpointClash("/data/gc", "/data/gc").find("is the mountpoint") != std::string::npos);
  CHECK(MountpointClash("/mnt/gc/data", "/mnt/gc").find("inside the mountpoint") != std::string::npos);
  CHECK(MountpointClash("/data/gc", "/data/gc/mnt/").find("is inside data directory") != std::string::npos);
  CHECK(MountpointClash("/data/gc", "/data/gc2").empty());
  CHECK(DataDirsOverlap({"/x/d1", "/x/d1/"}).find("another data directory") != std::string::npos);
  CHECK(DataDirsOverlap({"/x/d1", "/x/d1/sub"}).find("another data directory") != std::string::npos);
  CHECK(DataDirsOverlap({"/x/d1", "/x/d10"}).empty());
}

TEST_CASE("Operator files: a FIFO, a device, a directory or an oversized file is refused without blocking") {
  test::TempDir tmp;
  std::string error;
  const std::string fifo = tmp.path() + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_FALSE(ReadSmallRegularFile(fifo, 1024, &error));  // before, open() waited for a writer
  CHECK(error.find("not a regular file") != std::string::npos);
  CHECK_FALSE(ReadSmallRegularFile("/dev/zero", 1024, &error));
  CHECK(error.find("not a regular file") != std::string::npos);
  CHECK_FALSE(ReadSmallRegularFile(tmp.path(), 1024, &error));
  CHECK(error.find("directory") != std::string::npos);
  CHECK_FALSE(ReadSmallRegularFile(tmp.path() + "/missing", 1024, &error));
  CHECK(error == tmp.path() + "/missing: no such file");
  std::ofstream(tmp.path() + "/big") << std::string(2000, 'x');
  CHECK_FALSE(ReadSmallRegularFile(tmp.path() + "/big", 1024, &error));
  CHECK(error.find("larger than 1024 bytes") != std::string::npos);
  // A link to a regular file is followed (secret volumes are links); a link to a FIFO is not.
  fs::create_symlink(tmp.path() + "/big", tmp.path() + "/link");
  CHECK(ReadSmallRegularFile(tmp.path() + "/link", 4096, &error) == std::string(2000, 'x'));
  fs::create_symlink(fifo, tmp.path() + "/link-to-fifo");
  CHECK_FALSE(ReadSmallRegularFile(tmp.path() + "/link-to-fifo", 4096, &error));
}

TEST_CASE("No-symlink opens: a link in any component is ELOOP") {
  test::TempDir tmp;
  fs::create_directories(tmp.path() + "/real/sub");
  std::ofstream(tmp.path() + "/real/sub/f") << "x";
  fs::create_directory_symlink(tmp.path() + "/real", tmp.path() + "/link");
  Fd ok(OpenNoSymlinks(tmp.path() + "/real/sub/f", O_RDONLY));
  CHECK(ok.valid());
  CHECK(OpenNoSymlinks(tmp.path() + "/link/sub/f", O_RDONLY) == -ELOOP);
  fs::create_symlink(tmp.path() + "/real/sub/f", tmp.path() + "/real/flink");
  CHECK(OpenNoSymlinks(tmp.path() + "/real/flink", O_RDONLY) == -ELOOP);
  ParentDir p = OpenParentNoSymlinks(tmp.path() + "/link/sub/f");
  CHECK(p.dir.get() == -ELOOP);
}
// Review (2026-12-07): two data directories on one filesystem started without a word, and
// placement, which weighs each by its filesystem's free bytes, gave that filesystem twice its
// share of new blocks.
TEST_CASE("Data dirs: two on one filesystem are named in a warning, one each is not") {
  test::TempDir tmp;
  const std::string a = tmp.path() + "/a", b = tmp.path() + "/not-yet/b";
  REQUIRE(::mkdir(a.c_str(), 0700) == 0);
  const std::string warn = DataDirsSharingFilesystem({a, b});
  CHECK(warn.find(a) != std::string::npos);
  CHECK(warn.find(b) != std::string::npos);
  CHECK(warn.find("one filesystem") != std::string::npos);
  CHECK(DataDirsSharingFilesystem({a}).empty());
  struct stat shm {}, here {};
  if (::stat("/dev/shm", &shm) == 0 && ::stat(a.c_str(), &here) == 0 && shm.st_dev != here.st_dev) {
    CHECK(DataDirsSharingFilesystem({a, "/dev/shm/gpucache-test-not-made"}).empty());
  }
}

}  // namespace gpucache
