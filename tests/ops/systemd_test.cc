// The systemd unit and the readiness protocol (Type=notify), without systemd as PID 1: the unit
// is checked by systemd-analyze, and readiness by a fake NOTIFY_SOCKET listener.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "tests/support/http_get.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

bool Mounted(const std::string& dir) {
  struct statfs fs;
  return ::statfs(dir.c_str(), &fs) == 0 && fs.f_type == kFuseSuperMagic;
}

// Waits up to `seconds` for one datagram on `fd`.
std::string Receive(int fd, int seconds) {
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, n) : std::string();
}

TEST_CASE("systemd: the unit file verifies") {
  test::TempDir tmp;
  std::ifstream in(GPUCACHE_SOURCE_DIR "/packaging/gpucachefs.service");
  std::stringstream unit;
  unit << in.rdbuf();
  std::string text = unit.str();
  CHECK(text.find("Type=notify") != std::string::npos);
  CHECK(text.find("Restart=on-failure") != std::string::npos);
  CHECK(text.find("RestartPreventExitStatus=64 78") != std::string::npos);  // the same every time
  CHECK(text.find("TimeoutStartSec=15min") != std::string::npos);  // a start that reads every file
  CHECK(text.find("ExecStopPost=-/usr/libexec/gpucache/unmount-stale ${GPUCACHE_MOUNTPOINT}") != std::string::npos);
  // Each of these gives the service a mount namespace, a slave of the host's: the FUSE mount
  // would stay inside it, invisible to the engines (docs/operations.md, "Service hardening").
  for (const char* forbidden : {"PrivateTmp", "ProtectSystem", "PrivateMounts", "ProtectHome",
                                "PrivateDevices", "ReadWritePaths", "ReadOnlyPaths",
                                "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
                                "ProtectControlGroups", "ProtectProc", "TemporaryFileSystem"}) {
    CHECK(text.find(std::string("\n") + forbidden + "=") == std::string::npos);
  }
  // The installed path does not exist here: check a copy that runs the built binary.
  REQUIRE(text.find("/usr/bin/gpucachefs") != std::string::npos);
  for (size_t at; (at = text.find("/usr/bin/gpucachefs")) != std::string::npos;) {
    text.replace(at, std::string("/usr/bin/gpucachefs").size(), GPUCACHEFS_BIN);
  }
  const std::string unmount_stale = "/usr/libexec/gpucache/unmount-stale";
  for (size_t at; (at = text.find(unmount_stale)) != std::string::npos;) {
    text.replace(at, unmount_stale.size(), GPUCACHE_SOURCE_DIR "/packaging/gpucache-unmount-stale");
  }
  std::string copy = tmp.path() + "/gpucachefs.service";
  std::ofstream(copy) << text;
  std::string cmd = "systemd-analyze verify --man=no " + copy + " 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
}

// The unit's ExecReload= lines, run in order as systemd runs them (the first failure ends the
// reload, and systemctl reload exits non-zero), with GPUCACHE_CONFIG in the environment (and
// ${GPUCACHE_CONFIG} expanded, as systemd does) and $MAINPID given; "$$" is systemd's "$".
// Returns the exit status of the first line that failed, 0 if all succeeded.
int RunReloadLines(const std::string& config, pid_t main_pid, const std::string& mountpoint = "/nonexistent/mnt") {
  std::ifstream in(GPUCACHE_SOURCE_DIR "/packaging/gpucachefs.service");
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("ExecReload=")) continue;
    std::string cmd = line.substr(std::string("ExecReload=").size());
    auto substitute = [&](const std::string& from, const std::string& to) {
      for (size_t at; (at = cmd.find(from)) != std::string::npos;) cmd.replace(at, from.size(), to);
    };
    substitute("/usr/bin/gpucachefs", GPUCACHEFS_BIN);
    substitute("${GPUCACHE_CONFIG}", config);
    substitute("$MAINPID", std::to_string(main_pid));
    substitute("$$", "$");
    ++lines;
    int status = std::system(
        ("GPUCACHE_CONFIG='" + config + "' GPUCACHE_MOUNTPOINT='" + mountpoint + "' " + cmd + " 2>/dev/null").c_str());
    if (status != 0) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  REQUIRE(lines > 0);
  return 0;
}

// Regression (review, 2026-12-06): ExecReload= only sent SIGHUP, which always succeeds, so
// `systemctl reload` reported success for a file that did not even parse.
TEST_CASE("systemd: a reload of a file start-up would refuse fails, and the daemon is not signalled") {
  test::TempDir tmp;
  std::string good = tmp.path() + "/good.toml", bad = tmp.path() + "/bad.toml";
  std::ofstream(good) << "data_dir = \"" << tmp.path() << "/d\"\n[tenants.a]\nuids = [1]\n";
  std::ofstream(bad) << "data_dir = \"" << tmp.path() << "/d\"\n[tenants.a]\nuidz = [1]\n";
  auto stand_in = [] {  // a main process that SIGHUP ends
    pid_t pid = ::fork();
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
    return pid;
  };
  pid_t main_pid = stand_in();
  CHECK(RunReloadLines(bad, main_pid) == 78);  // EX_CONFIG, from --check-config
  CHECK(::waitpid(main_pid, nullptr, WNOHANG) == 0);  // still running: never signalled
  // Regression (review, 2026-12-07): the check ran without the mountpoint, so a data directory
  // moved inside it passed `systemctl reload` (the daemon refused it only in its log).
  const std::string mnt = tmp.path() + "/mnt";
  std::filesystem::create_directories(mnt);
  const std::string inside = tmp.path() + "/inside.toml";
  std::ofstream(inside) << "data_dir = \"" << mnt << "/d\"\n[tenants.a]\nuids = [1]\n";
  CHECK(RunReloadLines(inside, main_pid, mnt) == 78);
  CHECK(::waitpid(main_pid, nullptr, WNOHANG) == 0);
  ::kill(main_pid, SIGKILL);
  ::waitpid(main_pid, nullptr, 0);
  // Regression (review, 2026-12-07): the configuration's path went unquoted into `sh -c`, so
  // a path with a space failed every reload (and a shell metacharacter in it ran).
  const std::string spaced = tmp.path() + "/site config.toml";
  std::filesystem::copy_file(good, spaced);
  for (const std::string& config : {good, spaced}) {
    CAPTURE(config);
    main_pid = stand_in();
    const int reload = RunReloadLines(config, main_pid);
    CHECK(reload == 0);
    if (reload != 0) ::kill(main_pid, SIGKILL);  // never signalled: do not wait for it forever
    int status = 0;
    CHECK(::waitpid(main_pid, &status, 0) == main_pid);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGHUP));
  }
}

struct Daemon {
  test::TempDir tmp;
  std::string mnt = tmp.path() + "/mnt", config = tmp.path() + "/c.toml",
              socket_path = tmp.path() + "/notify.sock";
  int sock = -1;
  pid_t pid = -1;

  explicit Daemon(const std::string& config_text) {
    ::mkdir(mnt.c_str(), 0755);
    std::ofstream(config) << config_text;
    sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
    REQUIRE(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    pid = ::fork();
    if (pid == 0) {
      ::setenv("NOTIFY_SOCKET", socket_path.c_str(), 1);
      int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 2);
      ::execl(GPUCACHEFS_BIN, "gpucachefs", config.c_str(), mnt.c_str(), "-f", nullptr);
      ::_exit(127);
    }
  }
  int Wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  ~Daemon() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    (void)std::system(("fusermount3 -u -z " + mnt + " 2>/dev/null").c_str());
    ::close(sock);
  }
};

TEST_CASE("systemd: READY=1 comes only once the mount is up, SIGTERM says STOPPING=1 and unmounts") {
  test::TempDir data;
  Daemon d("data_dir = \"" + data.path() + "/d\"\n[metrics]\nlisten = \"\"\n[tenants.t]\nuids = [0]\n");
  std::string ready = Receive(d.sock, 10);
  REQUIRE(ready.find("READY=1") != std::string::npos);
  CHECK(Mounted(d.mnt));  // no READY before the mount
  CHECK(ready.find("STATUS=serving") != std::string::npos);
  ::kill(d.pid, SIGTERM);
  CHECK(Receive(d.sock, 10).find("STOPPING=1") != std::string::npos);
  CHECK(d.Wait() == 0);
  CHECK_FALSE(Mounted(d.mnt));
}

// The signals blocked by thread `tid` of process `pid` (SigBlk in its status), or ~0 if it is gone.
uint64_t BlockedSignals(pid_t pid, const std::string& tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + tid + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigBlk:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  }
  return ~uint64_t{0};
}

std::vector<std::string> Threads(pid_t pid) {
  std::vector<std::string> tids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    tids.push_back(e.path().filename().string());
  }
  return tids;
}

// libfuse 3.17 ends its loop on SIGTERM only when the handler runs on the loop's own thread: run
// on any other thread it sets a flag that nothing looks at until the next FUSE request, and
// SIGTERM right after READY=1 left the daemon running (CI, stop 32). Which thread the kernel
// picks is a race; which threads could take the signal is not.
TEST_CASE("systemd: only the loop's thread takes SIGTERM, SIGINT and SIGHUP") {
  test::TempDir data;
  Daemon d("data_dir = \"" + data.path() + "/d\"\n[metrics]\nlisten = \"127.0.0.1:" +
           std::to_string(test::FreeLoopbackPort()) + "\"\n"
           "[tenants.t]\nuids = [0]\n");
  REQUIRE(Receive(d.sock, 10).find("READY=1") != std::string::npos);
  constexpr uint64_t kTeardown = (1ull << (SIGHUP - 1)) | (1ull << (SIGINT - 1)) |
                                 (1ull << (SIGTERM - 1));
  std::string main_tid = std::to_string(d.pid);
  // The loop's thread unblocks them just after READY=1.
  for (int i = 0; i < 500 && (BlockedSignals(d.pid, main_tid) & kTeardown) != 0; ++i) {
    ::usleep(10'000);
  }
  CHECK((BlockedSignals(d.pid, main_tid) & kTeardown) == 0);
  std::vector<std::string> tids = Threads(d.pid);
  CHECK(tids.size() > 3);  // the invalidator, the housekeeper, FUSE workers, ...
  for (const std::string& tid : tids) {
    if (tid == main_tid) continue;
    INFO("thread " << tid);
    CHECK((BlockedSignals(d.pid, tid) & kTeardown) == kTeardown);
  }
  ::kill(d.pid, SIGTERM);
  CHECK(d.Wait() == 0);
}

TEST_CASE("systemd: a bad configuration never reports ready and exits 78") {
  Daemon d("data_dir = \"relative/path\"\n[tenants.t]\nuids = [0]\n");
  CHECK(Receive(d.sock, 2).empty());
  CHECK(d.Wait() == 78);
  CHECK_FALSE(Mounted(d.mnt));
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

TEST_CASE("mount helper: mount.fuse3 starts a detached daemon with mount(8)-style options") {
  test::TempDir tmp;
  std::string cfg = tmp.path() + "/c.toml", mnt = tmp.path() + "/mnt";
  ::mkdir(mnt.c_str(), 0755);
  std::ofstream(cfg) << "data_dir = \"" << tmp.path() << "/d\"\n[metrics]\nlisten = \"\"\n"
                     << "[tenants.t]\nuids = [0]\n";
  // The "program#source" form: what `mount -t fuse.gpucachefs CONFIG MNT` does with
  // /usr/bin/gpucachefs, here with the built binary. nofail and _netdev are fstab-only options.
  std::string cmd = "/sbin/mount.fuse3 '" + std::string(GPUCACHEFS_BIN) + "#" + cfg + "' " + mnt +
                    " -o rw,nofail,_netdev,noatime 2>/dev/null";
  // Whatever fails below, the detached daemon's mount goes (the daemon exits with it).
  struct Unmount {
    std::string mnt;
    ~Unmount() { (void)std::system(("fusermount3 -u -z " + mnt + " 2>/dev/null").c_str()); }
  } unmount{mnt};
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(Mounted(mnt));  // mount returned: the daemon detached after mounting
  uint64_t e = 0;
  {
    std::ifstream epoch(mnt + "/.gpucache/epoch");
    CHECK(static_cast<bool>(epoch >> e));
  }  // closed: an open file keeps the mount busy
  CHECK(e == 1);
  CHECK(std::system(("fusermount3 -u " + mnt).c_str()) == 0);
  CHECK_FALSE(Mounted(mnt));
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

// The per-mount options (field 6 of /proc/self/mountinfo) of the mount at `dir`.
std::set<std::string> MountFlags(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, majmin, root, mountpoint, options;
    f >> id >> parent >> majmin >> root >> mountpoint >> options;
    if (mountpoint != dir) continue;
    flags.clear();  // the last mount at dir is the visible one
    std::istringstream o(options);
    for (std::string item; std::getline(o, item, ',');) flags.insert(item);
  }
  return flags;
}

// Mounts through packaging/mount.fuse.gpucachefs (what mount(8) runs for type fuse.gpucachefs)
// with `options` ("-o LIST" unless `attached`: "-oLIST"), and returns the mount's flags.
std::set<std::string> FlagsThroughHelper(const std::string& options, bool attached = false) {
  test::TempDir tmp;
  std::string cfg = tmp.path() + "/c.toml", mnt = tmp.path() + "/mnt";
  ::mkdir(mnt.c_str(), 0755);
  std::ofstream(cfg) << "data_dir = \"" << tmp.path() << "/d\"\n[metrics]\nlisten = \"\"\n"
                     << "[tenants.t]\nuids = [0]\n";
  std::string cmd = "GPUCACHEFS=" GPUCACHEFS_BIN " " GPUCACHE_SOURCE_DIR
                    "/packaging/mount.fuse.gpucachefs " + cfg + " " + mnt +
                    (attached ? " -o" : " -o ") + options + " 2>/dev/null";
  struct Unmount {
    std::string mnt;
    ~Unmount() { (void)std::system(("fusermount3 -u -z " + mnt + " 2>/dev/null").c_str()); }
  } unmount{mnt};
  if (std::system(cmd.c_str()) != 0 || !Mounted(mnt)) return {"not mounted"};
  return MountFlags(mnt);
}

TEST_CASE("mount options: mount(8)'s helper and the fstab options give nosuid,nodev") {
  auto flags = FlagsThroughHelper("rw,nofail,_netdev,noatime");  // the fstab line, plus rw
  CHECK(flags.count("nosuid") == 1);
  CHECK(flags.count("nodev") == 1);
  CHECK(flags.count("noatime") == 1);  // other options still reach the mount
}

TEST_CASE("mount options: suid and dev given explicitly override the default") {
  auto flags = FlagsThroughHelper("rw,suid,dev");
  CHECK(flags.count("rw") == 1);
  CHECK(flags.count("nosuid") == 0);
  CHECK(flags.count("nodev") == 0);
}

// Regression (review, 2026-12-07): "-oLIST" (no space, as mount(8) and people write it) was
// dropped, so "-oro" mounted read-write.
TEST_CASE("mount options: the helper takes -oLIST written without a space") {
  auto flags = FlagsThroughHelper("suid,dev", /*attached=*/true);
  CHECK(flags.count("not mounted") == 0);
  CHECK(flags.count("nosuid") == 0);
  CHECK(flags.count("nodev") == 0);
}

// The helper's exit status as mount(8) gets it (a shell's $?).
int HelperStatus(const std::string& args) {
  int status = std::system(("GPUCACHEFS=" GPUCACHEFS_BIN " " GPUCACHE_SOURCE_DIR
                            "/packaging/mount.fuse.gpucachefs " + args + " 2>/dev/null").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Regression (review, 2026-12-07): the helper passed on the daemon's own exit statuses (78 for
// a configuration it refuses, 64 for bad usage), which mount(8) returns as they are: 64 means
// "some mount succeeded" to it. A trailing -o made dash fail with "can't shift" (2).
TEST_CASE("mount helper: exit statuses are mount(8)'s: 32 for a failed mount, 1 for bad usage") {
  test::TempDir tmp;
  const std::string mnt = tmp.path() + "/mnt";
  ::mkdir(mnt.c_str(), 0755);
  CHECK(HelperStatus(tmp.path() + "/missing.toml " + mnt) == 32);
  std::ofstream(tmp.path() + "/bad.toml") << "no_such_key = 1\n";
  CHECK(HelperStatus(tmp.path() + "/bad.toml " + mnt) == 32);
  CHECK(HelperStatus(tmp.path() + "/bad.toml " + tmp.path() + "/no-such-dir") == 1);
  CHECK(HelperStatus(tmp.path() + "/bad.toml " + mnt + " -o") == 1);
  CHECK(HelperStatus(tmp.path() + "/bad.toml") == 1);
  CHECK_FALSE(Mounted(mnt));
}

TEST_CASE("mount options: the daemon started directly (systemd's ExecStart) mounts nosuid,nodev") {
  test::TempDir data;
  Daemon d("data_dir = \"" + data.path() + "/d\"\n[metrics]\nlisten = \"\"\n[tenants.t]\nuids = [0]\n");
  REQUIRE(Receive(d.sock, 10).find("READY=1") != std::string::npos);
  auto flags = MountFlags(d.mnt);
  CHECK(flags.count("nosuid") == 1);
  CHECK(flags.count("nodev") == 1);
}

}  // namespace
}  // namespace gpucache
