// What the unit (packaging/gpucachefs.service) runs around the daemon at its mountpoint, run as
// systemd runs it: ExecStartPre= and ExecStopPost= clear a mount whose daemon is gone and leave
// one that answers; the mountpoint's parents are made reachable whatever UMask= says.
#include <doctest/doctest.h>
#include <filesystem>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// The unit's lines that begin with `key`, as systemd would run them: installed paths replaced
// by the source tree's, ${GPUCACHE_MOUNTPOINT} replaced, $$ made $, and the unit's Environment=
// given to them (GPUCACHE_MOUNTPOINT = `mnt`). `ignore_failure`: the line began with '-'.
struct UnitLine {
  std::string cmd;
  bool ignore_failure = false;
};
std::vector<UnitLine> UnitLines(const std::string& key, const std::string& mnt) {
  std::ifstream in(GPUCACHE_SOURCE_DIR "/packaging/gpucachefs.service");
  std::vector<UnitLine> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key + "=")) continue;
    std::string cmd = line.substr(key.size() + 1);
    bool ignore_failure = cmd.starts_with("-");
    if (ignore_failure) cmd.erase(0, 1);
    auto substitute = [&](const std::string& from, const std::string& to) {
      for (size_t at = 0; (at = cmd.find(from, at)) != std::string::npos; at += to.size()) {
        cmd.replace(at, from.size(), to);
      }
    };
    substitute("${GPUCACHE_MOUNTPOINT}", mnt);
    substitute("$$", "$");
    substitute("/usr/libexec/gpucache/unmount-stale", GPUCACHE_SOURCE_DIR "/packaging/gpucache-unmount-stale");
    out.push_back({"GPUCACHE_MOUNTPOINT='" + mnt + "' " + cmd + " 2>/dev/null", ignore_failure});
  }
  return out;
}

// A FUSE mount whose daemon is gone: statfs asks the daemon, and the kernel answers ENOTCONN.
bool Stale(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) != 0 && errno == ENOTCONN;
}

// Runs them in order as systemd does: a line that fails, unless it began with '-', ends the
// sequence (the start fails). False if one did.
bool RunUnitLines(const std::string& key, const std::string& mnt) {
  std::vector<UnitLine> lines = UnitLines(key, mnt);
  REQUIRE(!lines.empty());
  for (const UnitLine& line : lines) {
    CAPTURE(line.cmd);
    if (std::system(line.cmd.c_str()) != 0 && !line.ignore_failure) return false;
  }
  return true;
}

// Regression (review, 2026-12-07): both lines ran `fusermount3 -u -z` on the mountpoint, so
// starting the unit while a gpucachefs started by hand or by fstab served engines there
// detached that mount from under them (and the failed start's ExecStopPost= did it again).
TEST_CASE("systemd: ExecStartPre= and ExecStopPost= leave a mount that answers at the mountpoint") {
  MountedFs m;
  for (const char* key : {"ExecStartPre", "ExecStopPost"}) {
    CAPTURE(key);
    CHECK(RunUnitLines(key, m.mnt()));
    CHECK(m.Mounted());
    struct stat st;
    CHECK(::stat((m.mnt() + "/.gpucache/epoch").c_str(), &st) == 0);  // it still serves
  }
}

// With entry_timeout = 0 the kernel asks the daemon about the mountpoint at once: a stat of it
// fails (ENOTCONN), so the unit's mkdir of the mountpoint failed the start before the stale
// mount was cleared (review, 2026-12-07), and Restart= failed the same way every time.
TEST_CASE("systemd: ExecStartPre= and ExecStopPost= clear a mount whose daemon is gone") {
  for (const char* key : {"ExecStartPre", "ExecStopPost"}) {
    CAPTURE(key);
    MountedFs m("[tenants.acme]\nuids = [0]\n[metrics]\nlisten = \"\"\n"
                "[fuse]\nentry_timeout = 0\nnegative_timeout = 0\n");
    ::kill(m.pid(), SIGKILL);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!Stale(m.mnt()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(Stale(m.mnt()));
    CHECK(RunUnitLines(key, m.mnt()));
    CHECK_FALSE(Stale(m.mnt()));
    CHECK_FALSE(m.Mounted());
    struct stat st;
    CHECK(::stat(m.mnt().c_str(), &st) == 0);  // a plain directory again
  }
}

// Regression (review, 2026-12-07): a daemon killed while a thread of it waited in the kernel on
// a directory's lock (an invalidation, under a request nobody answers any more) cannot exit: its
// connection lives on, every access to the mount hangs, and the helper left such a mount alone,
// so the unit could not start again. It now aborts the connection of a mount that does not
// answer when the daemon that recorded it (/run/gpucache/connection-MINOR) is gone, and never
// while it lives. A stopped daemon stands in for the stuck one: its mount hangs the same way.
TEST_CASE("systemd: ExecStartPre= clears a hung mount whose daemon is gone, never one whose daemon lives") {
  MountedFs m;
  std::string record;
  for (const auto& e : std::filesystem::directory_iterator("/run/gpucache")) {
    if (e.path().filename().string().starts_with("connection-") &&
        ReadText(e.path().string()) == std::to_string(m.pid()) + "\n") {
      record = e.path().string();
    }
  }
  REQUIRE_FALSE(record.empty());  // the daemon recorded its connection
  REQUIRE(::kill(m.pid(), SIGSTOP) == 0);
  // Through a link to the mount's parent and with a trailing '/', as a unit may spell it.
  const std::string link = m.scratch() + "-link";
  REQUIRE(::symlink(m.scratch().c_str(), link.c_str()) == 0);
  auto helper = [&] {
    return std::system(("GPUCACHE_UNMOUNT_STALE_TIMEOUT=1 " GPUCACHE_SOURCE_DIR "/packaging/gpucache-unmount-stale " +
                        link + "/mnt/ 2>/dev/null").c_str());
  };
  // The mount table, not statfs (which would hang on this mount).
  auto in_table = [&] { return ReadText("/proc/self/mounts").find(" " + m.mnt() + " fuse.gpucachefs ") != std::string::npos; };
  CHECK(helper() == 0);
  CHECK(in_table());  // it hangs, but its daemon lives: left alone
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  std::ofstream(record) << gone << "\n";  // as if the recorded daemon were gone
  CHECK(helper() == 0);
  CHECK_FALSE(in_table());
  CHECK_FALSE(std::filesystem::exists(record));
  struct statfs fs;
  CHECK(::statfs(m.mnt().c_str(), &fs) == 0);  // a plain directory again, at once
  ::unlink(link.c_str());
  ::kill(m.pid(), SIGCONT);
}

// Regression (review, 2026-12-07): a second daemon started on a mountpoint a gpucachefs serves
// (the unit started while one runs by hand or from fstab, with another data directory) mounted
// over it, hiding it from the engines that used it. It now refuses, as for bad usage (64), and
// touches nothing.
TEST_CASE("gpucachefs: a mountpoint another gpucachefs serves is refused, and that one keeps serving") {
  MountedFs m;
  TempDir other;
  const std::string config = other.path() + "/c.toml";
  std::ofstream(config) << "data_dir = \"" << other.path() << "/d\"\n[metrics]\nlisten = \"\"\n"
                        << "[tenants.t]\nuids = [0]\n";
  const std::string err = other.path() + "/err";
  int status = std::system((std::string(GPUCACHEFS_BIN) + " " + config + " " + m.mnt() + " 2>" + err).c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 64);
  CHECK(ReadText(err).find("another gpucachefs serves it") != std::string::npos);
  struct stat st;
  CHECK(::stat((other.path() + "/d").c_str(), &st) != 0);  // its data directory never made
  CHECK(m.Mounted());
  CHECK(::stat((m.mnt() + "/.gpucache/epoch").c_str(), &st) == 0);
  // The mount the test's daemon made is the only one there: unmounting it leaves no other.
  CHECK(std::system(("fusermount3 -u " + m.mnt()).c_str()) == 0);
  CHECK(m.WaitForExit() == 0);
  struct statfs fs;
  CHECK(::statfs(m.mnt().c_str(), &fs) == 0);
  CHECK(fs.f_type != 0x65735546);  // FUSE_SUPER_MAGIC
}

// Regression (review, 2026-12-07): a second daemon whose mountpoint was a running daemon's data
// directory mounted there: the first took its block files for deleted (EIO, "checksum mismatch",
// the block dropped from its index) and refused commits. A mountpoint that is, or is inside, a
// gpucache data directory is a configuration error (78), from --check-config too.
TEST_CASE("gpucachefs: a mountpoint in a gpucache data directory is refused, and that daemon keeps its blocks") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(4096)) == 0);
  TempDir other;
  const std::string config = other.path() + "/c.toml";
  std::ofstream(config) << "data_dir = \"" << other.path() << "/d\"\n[metrics]\nlisten = \"\"\n"
                        << "[tenants.t]\nuids = [0]\n";
  ::mkdir((m.data() + "/sub").c_str(), 0755);
  for (const std::string& mountpoint : {m.data(), m.data() + "/sub"}) {
    CAPTURE(mountpoint);
    const std::string err = other.path() + "/err";
    // Bounded: a daemon that mounted (the old code) stays in the foreground until its SIGTERM.
    int status = std::system(("timeout 20 " GPUCACHEFS_BIN " " + config + " " + mountpoint + " -f 2>" + err).c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 78);
    CHECK(ReadText(err).find("gpucache data directory " + m.data()) != std::string::npos);
    status = std::system((std::string(GPUCACHEFS_BIN) + " --check-config " + config + " " + mountpoint +
                          " >/dev/null 2>&1").c_str());
    CHECK(WEXITSTATUS(status) == 78);
  }
  struct stat st;
  CHECK(::stat((other.path() + "/d").c_str(), &st) != 0);  // its data directory never made
  auto got = client.Read(id);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == Payload(4096));
  CHECK(Metric(m, "gpucache_checksum_failures_total{tenant=\"acme\"}") == 0);
}

// Regression (review, 2026-12-07): `mkdir -p` ran under the unit's UMask=0077, so a mountpoint
// set by `systemctl edit` under new directories got parents of mode 0700, which refused every
// tenant's engine (EACCES on every path) while root saw nothing wrong.
TEST_CASE("systemd: ExecStartPre= makes the mountpoint's new parents reachable by every user") {
  TempDir tmp;
  const std::string mnt = tmp.path() + "/data/gpucache/mnt";
  std::vector<UnitLine> lines = UnitLines("ExecStartPre", mnt);
  REQUIRE(!lines.empty());
  for (const UnitLine& line : lines) {
    CAPTURE(line.cmd);
    CHECK(std::system(("umask 077; " + line.cmd).c_str()) == 0);  // UMask=0077, as the unit sets
  }
  for (const std::string& dir : {tmp.path() + "/data", tmp.path() + "/data/gpucache", mnt}) {
    CAPTURE(dir);
    struct stat st;
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0755);
  }
}

}  // namespace
}  // namespace gpucache
