#include "store/data_dir_claim.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/mount_escape.h"
#include "store/env.h"
#include "store/index_journal.h"
#include "store/posix_io.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;

constexpr char kFix[] = "; give data_dir a new or empty directory of its own, e.g. /var/lib/gpucache";

// "/x/d1/", "/x//d1" and "/x/./d1" are the same directory.
std::string Normal(const std::string& dir) {
  std::string n = fs::path(dir).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

bool Within(std::string_view path, std::string_view dir) {
  if (dir == "/") return true;
  return path == dir || (path.starts_with(dir) && path.size() > dir.size() && path[dir.size()] == '/');
}

// Directories of the system: a start would write its files into them (and, before adr/0017,
// empty their tmp/). Empty ones (/mnt, /srv) are refused too: they are shared by convention.
bool IsSystemDirectory(const std::string& n) {
  static const std::set<std::string, std::less<>> kSystem = {
      "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
      "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr",
      "/var", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/local", "/usr/sbin",
      "/usr/share", "/usr/src", "/var/backups", "/var/cache", "/var/lib", "/var/local",
      "/var/lock", "/var/log", "/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp",
      "/run/user", "/dev/shm"};
  if (kSystem.count(n)) return true;
  // Kernel filesystems hold no data of ours; /dev/shm/<dir> is a tmpfs directory like any other.
  return (Within(n, "/proc") || Within(n, "/sys") || Within(n, "/dev")) && !Within(n, "/dev/shm");
}

// The names a gpucache data directory holds at its top, in every version so far.
bool IsOwnTopLevelName(std::string_view name) {
  static const std::set<std::string, std::less<>> kOwn = {
      kDataDirMarker, "GPUCACHE-DATA.tmp", "LOCK", "EPOCH", "EPOCH.tmp", "PINS", "PINS.tmp",
      "INDEX", "INDEX.tmp", kJournalFile, kOldJournalFile, "blocks", "tmp", "spare",
      "quarantine", "damaged", "lost+found"};
  return kOwn.count(name) != 0;
}

std::string SystemRefusal(const std::string& given, const std::string& resolved) {
  std::string shown = given == resolved ? given : given + " (which resolves to " + resolved + ")";
  return "data directory " + shown + " is a system directory, or inside /proc, /sys or /dev" + kFix;
}

// Why the marker in `dir` is not gpucache's, or empty.
std::string MarkerProblem(const std::string& dir) {
  std::string error;
  std::optional<std::string> text = ReadSmallRegularFile(dir + "/" + kDataDirMarker, 4096, &error);
  if (!text) return error;
  std::string_view first(kDataDirMarkerText);
  first = first.substr(0, first.find(',') + 1);  // "gpucache data directory,": any format
  if (!text->starts_with(first)) return dir + "/" + kDataDirMarker + " is not gpucache's marker";
  if (!text->starts_with(kDataDirMarkerText)) {
    return dir + "/" + kDataDirMarker + " names a format this gpucache does not know (" +
           text->substr(0, text->find('\n')) + "): a newer version made it";
  }
  return "";
}

// Why an existing directory is not (or cannot become) a data directory, or empty.
std::string ContentRefusal(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) return "cannot list data directory " + dir + ": " + ec.message();
  bool marked = false;
  std::string foreign;
  for (const std::string& name : names) {
    marked |= name == kDataDirMarker;
    if (!IsOwnTopLevelName(name) && foreign.empty()) foreign = name;
  }
  if (marked) {
    if (std::string why = MarkerProblem(dir); !why.empty()) return why;
  } else if (!foreign.empty()) {
    return "data directory " + dir + " holds files gpucache did not make (such as '" + foreign +
           "') and no " + kDataDirMarker + " marker" + kFix;
  }
  // Unmarked with only our names: empty, or made by a gpucache before the marker; both are taken.
  // What the store opens at the top must not lead elsewhere: its paths follow no link.
  for (const std::string& name : names) {
    if (name == "lost+found") continue;
    if (fs::is_symlink(fs::symlink_status(dir + "/" + name, ec))) {
      return dir + "/" + name + " is a symbolic link; gpucache follows no link inside its data " +
             "directory: replace it with the directory or file itself";
    }
  }
  return "";
}

}  // namespace

std::string DataDirRefusal(const std::string& dir) {
  if (dir.empty() || dir[0] != '/') return "data directory " + dir + " must be an absolute path";
  const std::string n = Normal(dir);
  if (IsSystemDirectory(n)) return SystemRefusal(dir, n);
  std::error_code ec;
  fs::file_status st = fs::status(n, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return "data directory " + dir + ": " + ec.message();
  }
  if (!fs::exists(st)) {
    std::string resolved = Normal(fs::weakly_canonical(n, ec).string());
    if (!ec && IsSystemDirectory(resolved)) return SystemRefusal(dir, resolved);
    return "";
  }
  std::string resolved = fs::canonical(n, ec).string();
  if (ec) return "data directory " + dir + ": " + ec.message();
  if (IsSystemDirectory(resolved)) return SystemRefusal(dir, resolved);
  if (!fs::is_directory(st)) return "data directory " + dir + " is not a directory" + kFix;
  return ContentRefusal(resolved);
}

namespace {

// The second field of each line of an fstab-format file (mount points); nullopt if unreadable.
std::optional<std::vector<std::string>> MountPointsIn(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string what, where;
    if (!(fields >> what >> where) || what.empty() || what[0] == '#') continue;
    out.push_back(Normal(UnescapeMountField(where)));
  }
  return out;
}

}  // namespace

// A missing data directory is created, on whatever filesystem holds its nearest existing
// ancestor. Under a mount point /etc/fstab names that is not mounted now (an entry that failed,
// a device gone), that is the root filesystem, which the cache would then fill (review,
// 2026-12-07).
std::string UnmountedParentRefusal(const std::string& dir, const std::string& fstab, const std::string& mounts) {
  std::error_code ec;
  const fs::path n = Normal(dir);
  // One in use (marked, or holding anything) was chosen where it is; an empty one may be the
  // mount point itself, left on the filesystem below while its device is not mounted.
  const bool exists = fs::exists(fs::symlink_status(n, ec));
  if (exists && (!fs::is_directory(n, ec) || !fs::is_empty(n, ec) || ec)) return "";
  const std::string d = Normal(fs::weakly_canonical(n, ec).string());
  const std::optional<std::vector<std::string>> mounted = MountPointsIn(mounts);
  const std::optional<std::vector<std::string>> listed = MountPointsIn(fstab);
  if (!mounted || !listed) return "";  // nothing known (no /proc in a chroot): no guess
  for (const std::string& m : *listed) {
    if (m.empty() || m[0] != '/' || m == "/" || !Within(d, m)) continue;
    if (std::find(mounted->begin(), mounted->end(), m) != mounted->end()) continue;
    return "data directory " + dir + (exists ? " is empty and" : " is missing and would be made") +
           (d == m ? " is " : " under ") + m + ", which " + fstab +
           " mounts but is not mounted now: on the filesystem below it, which the cache would fill. "
           "Mount " + m + "; or, to use the filesystem below it, mark " + dir + " as a data directory: " +
           "mkdir -p " + dir + " && echo '" + std::string(kDataDirMarkerText, sizeof kDataDirMarkerText - 2) +
           "' > " + dir + "/" + kDataDirMarker;
  }
  return "";
}

std::string MountpointClash(const std::string& dir, const std::string& mountpoint) {
  std::error_code ec;
  // A stale mountpoint (ENOTCONN) cannot be resolved: compare it as written.
  std::string d = Normal(fs::weakly_canonical(Normal(dir), ec).string());
  if (ec) d = Normal(dir);
  std::string m = Normal(fs::weakly_canonical(Normal(mountpoint), ec).string());
  if (ec) m = Normal(mountpoint);
  if (d == m) return "data directory " + dir + " is the mountpoint; give each its own directory";
  if (Within(d, m)) return "data directory " + dir + " is inside the mountpoint " + mountpoint;
  if (Within(m, d)) return "the mountpoint " + mountpoint + " is inside data directory " + dir;
  return "";
}

std::string MountpointInDataDir(const std::string& mountpoint) {
  std::error_code ec;
  std::string m = Normal(fs::weakly_canonical(Normal(mountpoint), ec).string());
  if (ec) m = Normal(mountpoint);
  for (fs::path p = m;; p = p.parent_path()) {
    if (fs::exists(fs::symlink_status(p / kDataDirMarker, ec))) {
      return "the mountpoint " + mountpoint + (p == fs::path(m) ? " is" : " is inside") +
             " the gpucache data directory " + p.string() + " (it holds " + kDataDirMarker +
             "): a mount there would hide its files from the daemon that owns it; choose a "
             "mountpoint outside every data directory";
    }
    if (p == p.parent_path()) return "";
  }
}

std::string DataDirsOverlap(const std::vector<std::string>& dirs) {
  std::vector<std::string> resolved;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::string r = Normal(fs::weakly_canonical(Normal(dir), ec).string());
    if (ec) r = Normal(dir);
    for (size_t i = 0; i < resolved.size(); ++i) {
      if (Within(r, resolved[i]) || Within(resolved[i], r)) {
        return "data directory " + dir + " (" + r + ") is, holds or is inside " + dirs[i] +
               ", another data directory; give each device a directory of its own";
      }
    }
    resolved.push_back(std::move(r));
  }
  return "";
}

std::string DataDirsSharingFilesystem(const std::vector<std::string>& dirs) {
  std::vector<dev_t> devices;
  for (const std::string& dir : dirs) {
    fs::path existing = Normal(dir);
    struct stat st {};
    while (::stat(existing.c_str(), &st) != 0 && existing != existing.parent_path()) {
      existing = existing.parent_path();
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] == st.st_dev) {
        return "data directories " + dirs[i] + " and " + dir + " are on one filesystem: placement " +
               "counts its free bytes once for each, so it takes more than its share of new " +
               "blocks, and a device failure there takes out both; give each device a directory " +
               "of its own";
      }
    }
    devices.push_back(st.st_dev);
  }
  return "";
}

bool ClaimDataDir(const std::string& dir, std::string* canonical, std::string* error) {
  if (std::string why = DataDirRefusal(dir); !why.empty()) {
    *error = why;
    return false;
  }
  const std::string n = Normal(dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(n, ec))) {
    fs::path existing = fs::path(n).parent_path();
    while (existing != existing.parent_path() && !fs::exists(fs::symlink_status(existing, ec))) {
      existing = existing.parent_path();
    }
    if (!fs::create_directories(n, ec) && ec) {
      *error = "cannot create data directory " + dir + ": " + ec.message();
      return false;
    }
    fs::permissions(n, fs::perms::owner_all, fs::perm_options::replace, ec);
    // Each new directory's name made durable in its parent: the marker's write syncs only the
    // data directory itself, and a power cut would drop it, acknowledged blocks and all.
    for (fs::path p = fs::path(n).parent_path();; p = p.parent_path()) {
      Env::Posix().SyncDir(p.string());
      if (p == existing || p == p.parent_path()) break;
    }
  }
  *canonical = fs::canonical(n, ec).string();
  if (ec) {
    *error = "data directory " + dir + ": " + ec.message();
    return false;
  }
  if (fs::exists(fs::symlink_status(*canonical + "/" + kDataDirMarker, ec))) return true;
  if (WriteFileAtomically(Env::Posix(), *canonical + "/" + kDataDirMarker, kDataDirMarkerText) !=
      StatusCode::kOk) {
    *error = "cannot write " + *canonical + "/" + kDataDirMarker + " (is the directory writable?)";
    return false;
  }
  return true;
}

}  // namespace gpucache
