#include "tests/support/mount_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace gpucache::test {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

}  // namespace

std::string TestConfig(const std::string& limits, const std::string& acme,
                       const std::string& globex) {
  return "[limits]\n" + limits + "\n[admins]\nuids = [0]\n" +
         "[tenants.acme]\nuids = [0, 1000]\n" + acme + "\n" +
         "[tenants.globex]\nuids = [2000]\n" + globex + "\n" +
         "[metrics]\nlisten = \"\"\n"  // tests run daemons side by side: no shared port
         "[fuse]\nentry_timeout = 3600\nnegative_timeout = 3600\n";
}

MountedFs::MountedFs(const std::string& config_body) : MountedFs(config_body, 0) { Start(); }

MountedFs::MountedFs(const std::string& config_body, int /*unstarted*/)
    : mnt_(tmp_.path() + "/mnt"),
      data_(tmp_.path() + "/data"),
      config_(tmp_.path() + "/gpucache.toml"),
      log_(tmp_.path() + "/daemon.log") {
  ::mkdir(mnt_.c_str(), 0755);
  // The scratch directory is 0700 from mkdtemp; tests run callers as other uids.
  ::chmod(tmp_.path().c_str(), 0755);
  // A body that lists its own data_dirs (several devices) replaces the single data_dir.
  bool own_dirs = config_body.find("data_dirs") != std::string::npos;
  std::ofstream(config_) << (own_dirs ? "" : "data_dir = \"" + data_ + "\"\n") << config_body;
}

MountedFs::MountedFs(const std::string& config_body, std::vector<std::string> launcher)
    : MountedFs(config_body, 0) {
  launcher_ = std::move(launcher);
  Start();
}

MountedFs::~MountedFs() {
  if (pid_ > 0) Kill();
}

std::string MountedFs::Log() const {
  std::ifstream in(log_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool MountedFs::Mounted() const {
  struct statfs fs;
  return ::statfs(mnt_.c_str(), &fs) == 0 && fs.f_type == kFuseSuperMagic;
}

void MountedFs::Start() {
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 2);
    std::vector<std::string> args = launcher_;
    for (const char* a : {GPUCACHEFS_BIN, config_.c_str(), mnt_.c_str(), "-f"}) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  if (!WaitFor([this] { return Mounted(); }, std::chrono::seconds(10))) {
    throw std::runtime_error("gpucachefs did not mount; log:\n" + Log());
  }
}

int MountedFs::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  return WaitForExit();
}

int MountedFs::WaitForExit() {
  if (pid_ <= 0) return -1;
  int status = 0;
  if (!WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, std::chrono::seconds(10))) {
    Kill();
    return -1;
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void MountedFs::Kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string cmd = "fusermount3 -u -z " + mnt_ + " 2>/dev/null";
  (void)std::system(cmd.c_str());
}

int AsUser(uid_t uid, gid_t gid, const std::function<int()>& fn) { return AsUser(uid, gid, {}, fn); }

int AsUser(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      ::_exit(254);
    }
    ::_exit(fn() & 0xff);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

int Errno(long rc) { return rc >= 0 ? 0 : errno; }

}  // namespace gpucache::test
