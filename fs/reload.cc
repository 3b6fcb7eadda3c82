#include "fs/reload.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fs/log.h"

namespace gpucache {
namespace {

std::atomic<int> g_event_fd{-1};
// A SIGHUP came that no reload has served yet. Set before the event is written: Start, which
// stores the event fd and then takes this flag, misses neither order of the two.
std::atomic<bool> g_pending{false};

extern "C" void OnSighup(int) {
  int saved = errno;  // a handler must leave errno as it found it
  g_pending.store(true);
  uint64_t one = 1;
  if (int fd = g_event_fd.load(); fd >= 0) (void)!::write(fd, &one, sizeof one);
  errno = saved;
}

void InstallSighupHandler() {
  struct sigaction sa {};
  sa.sa_handler = OnSighup;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGHUP, &sa, nullptr);
}

std::string Describe(const Config& c) {
  std::string tenants;
  for (const TenantConfig& t : c.tenants) tenants += (tenants.empty() ? "" : ", ") + t.name;
  return std::to_string(c.tenants.size()) + " tenant(s) (" + tenants + "), " +
         std::to_string(c.admin_uids.size()) + " admin uid(s), " +
         std::to_string(c.admin_gids.size()) + " admin gid(s)";
}

}  // namespace

Reloader::Reloader(std::string config_path, Filesystem& fs, ReloadHook hook)
    : config_path_(std::move(config_path)), fs_(fs), hook_(std::move(hook)) {}

Reloader::~Reloader() { Stop(); }

bool Reloader::Start(std::string* error) {
  event_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (event_fd_ < 0) {
    *error = std::string("cannot set up SIGHUP reload: eventfd: ") + std::strerror(errno);
    return false;
  }
  g_event_fd.store(event_fd_);
  InstallSighupHandler();
  if (g_pending.load()) {
    spdlog::info("reload: a SIGHUP came during the start: reloading now");
    uint64_t one = 1;
    (void)!::write(event_fd_, &one, sizeof one);
  }
  thread_ = std::thread([this] { Run(); });
  return true;
}

void Reloader::CatchSighupEarly() { InstallSighupHandler(); }

void Reloader::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(event_fd_, &one, sizeof one);
  thread_.join();
  ::signal(SIGHUP, SIG_IGN);  // a late SIGHUP during shutdown must not kill the daemon
  g_event_fd.store(-1);
  ::close(event_fd_);
  event_fd_ = -1;
}

void Reloader::Run() {
  while (true) {
    uint64_t n = 0;
    ssize_t got = ::read(event_fd_, &n, sizeof n);
    if (stop_) return;
    if (got != sizeof n) continue;  // EINTR: wait again
    g_pending.store(false);  // this reload serves every SIGHUP so far
    ReloadNow();  // several SIGHUPs before this ran: one reload covers them all
  }
}

bool Reloader::ReloadNow() {
  bool ok = TryReload();
  fs_.metrics().RecordReload(ok);
  return ok;
}

bool Reloader::TryReload() {
  const std::string origin = config_path_.empty() ? "the built-in defaults" : config_path_;
  Config fresh;
  try {
    fresh = config_path_.empty() ? DefaultConfig() : LoadConfig(config_path_);
  } catch (const ConfigError& e) {
    spdlog::error("reload: nothing changed: {}", e.what());
    return false;
  }
  if (hook_.startable) {
    if (std::string why = hook_.startable(fresh); !why.empty()) {
      spdlog::error("reload: nothing changed: {}: {} (start-up would refuse it too)", origin, why);
      return false;
    }
  }
  if (std::string why = fs_.CheckReload(fresh); !why.empty()) {
    spdlog::error("reload: nothing changed: {}: {}", origin, why);
    return false;
  }
  if (hook_.check) {
    if (std::string why = hook_.check(); !why.empty()) {
      spdlog::error("reload: nothing changed: {}", why);
      return false;
    }
  }
  std::vector<std::string> kept = fs_.Reload(fresh);
  if (hook_.apply) hook_.apply();
  for (const std::string& line : kept) {
    spdlog::warn("reload: needs a restart, kept the running value instead of: {}", line);
  }
  spdlog::info("reload: configuration reloaded from {}: {}; limits and quotas applied", origin,
               Describe(fresh));
  return true;
}

}  // namespace gpucache
