// Live reload: SIGHUP (systemctl reload) re-reads the configuration file and applies what can
// change while the mount serves (tenants, admins, limits and quotas; the cold tier's
// credentials through a hook) without unmounting and without fencing fills in flight.
//
// Every file is read without blocking and bounded in size (a FIFO or a device named as the
// configuration, keyring or credentials file is refused at once, never waited on), so a
// reload always finishes and the next SIGHUP is served; gpucache_config_reloads_total counts
// each outcome.
//
// Everything is read and checked before anything is applied: a file that does not parse, does
// not validate, or changes what cannot change live, changes nothing, and the log says why.
// Keys that need a restart (data directories, the metrics address, ...) are kept as they were
// and named in the log.
//
// The signal handler only writes to an eventfd; a thread of its own does the work, so a reload
// never runs inside a FUSE request or a signal handler.
//
// Thread safety: Start/Stop from one thread; ReloadNow may run concurrently with requests.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "fs/filesystem.h"

namespace gpucache {

// A part of the daemon outside fs/ with state to reload (the cold tier): Check reads and
// validates (empty: fine, else why not) without changing anything; Apply then takes it.
struct ReloadHook {
  // What start-up checks of a configuration beyond LoadConfig (data directories, [cold]): a
  // reload refuses what the next start would (its reason; "" when startable).
  std::function<std::string(const Config&)> startable;
  std::function<std::string()> check;
  std::function<void()> apply;
};

class Reloader {
 public:
  // `config_path` empty: the built-in defaults (nothing to re-read but the hooks' state).
  Reloader(std::string config_path, Filesystem& fs, ReloadHook hook = {});
  ~Reloader();
  Reloader(const Reloader&) = delete;
  Reloader& operator=(const Reloader&) = delete;

  // From the start of main: a SIGHUP before Start (reading the configuration, opening the
  // store: minutes with several data directories) is kept for Start instead of ending the
  // daemon, SIGHUP's default. libfuse then leaves SIGHUP alone (it sets its handlers only
  // where none is set).
  static void CatchSighupEarly();
  // Makes SIGHUP a reload (replacing libfuse's handler, which would unmount) and starts the
  // thread that serves it; one that came since CatchSighupEarly is served at once. Call after
  // detaching: threads do not survive fork.
  bool Start(std::string* error);
  void Stop();
  // Reads, checks and applies the configuration now; false (logged) if nothing changed.
  bool ReloadNow();

 private:
  void Run();
  bool TryReload();
  std::string config_path_;
  Filesystem& fs_;
  ReloadHook hook_;
  int event_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gpucache
