// gpucachefs: mounts the gpucache namespace.
//
//   gpucachefs CONFIG MOUNTPOINT [-f] [-d] [-o OPTIONS]     (mount-helper compatible)
//   gpucachefs --defaults MOUNTPOINT [-f] ...               built-in configuration
//   gpucachefs --print-default-config | --version | --help
//
// Without -f the daemon detaches after the mount is up. A bad configuration or an unusable data
// directory is reported with the key or path at fault, and nothing is mounted.
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <thread>
#include <string>
#include <vector>

#include "ctl/discover.h"
#include "fs/config.h"
#include "daemon/daemon_cold.h"
#include "fs/log.h"
#include "fs/metrics_http.h"
#include "fs/ram_dir.h"
#include "fs/reload.h"
#include "fs/session.h"
#include "store/data_dir_claim.h"
#include "store/file_store.h"

namespace {

constexpr char kUsage[] =
    "usage: gpucachefs CONFIG MOUNTPOINT [-f] [-d] [-o OPTIONS]\n"
    "       gpucachefs --defaults MOUNTPOINT [-f] [-d] [-o OPTIONS]\n"
    "       gpucachefs --check-config CONFIG [MOUNTPOINT]\n"
    "       gpucachefs --print-default-config | --version | --help\n"
    "\n"
    "Mounts the gpucache KV-block namespace at MOUNTPOINT, with blocks stored in the data\n"
    "directory named by CONFIG (TOML; see docs/configuration.md). --defaults uses the built-in\n"
    "configuration (data in /var/lib/gpucache, tenant 'default' for root).\n"
    "  -f          stay in the foreground\n"
    "  -d          trace FUSE requests (implies -f; the daemon logs at debug)\n"
    "  --log-level LEVEL  error, warn, info (default) or debug, without -d's request trace\n"
    "  -o OPTIONS  mount options, passed to FUSE (mount(8)-only ones are ignored)\n"
    "--check-config validates CONFIG (and its data directories against MOUNTPOINT, when given) and\n"
    "prints the effective configuration, defaults included.\n";

struct Args {
  std::string config;  // empty: built-in defaults
  bool defaults = false;
  std::string log_level;  // empty: info (debug with -d)
  gpucache::MountOptions mount;
};

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

bool IsMountOnlyOption(const std::string& o) {
  return o == "rw" || o == "defaults" || o == "auto" || o == "noauto" || o == "nofail" ||
         o == "_netdev" || o == "user" || o == "users" || o == "nouser" || o.rfind("x-", 0) == 0;
}

std::string FilterOptions(const std::string& list) {
  std::string out, item;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || list[i] == ',') {
      if (!item.empty() && !IsMountOnlyOption(item)) out += (out.empty() ? "" : ",") + item;
      item.clear();
    } else {
      item.push_back(list[i]);
    }
  }
  return out;
}

// A daemon that died left its mount behind: every access answers ENOTCONN.
std::string StaleMountHint(const std::string& mnt) {
  return "stale mount (a gpucachefs that served it is gone); run `fusermount3 -u -z " + mnt +
         "` and start again";
}

// Returns false (and prints why) on bad usage.
bool ParseArgs(int argc, char** argv, Args& a) {
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-f") a.mount.foreground = true;
    else if (arg == "-d") a.mount.debug = true;
    else if (arg == "--defaults") a.defaults = true;
    else if (arg == "--log-level" && i + 1 < argc) {
      a.log_level = argv[++i];
      if (a.log_level != "error" && a.log_level != "warn" && a.log_level != "info" && a.log_level != "debug") {
        std::fprintf(stderr, "gpucachefs: --log-level must be error, warn, info or debug, not %s\n",
                     a.log_level.c_str());
        return false;
      }
    }
    else if (arg == "-o" && i + 1 < argc) {
      std::string o = FilterOptions(argv[++i]);
      if (!o.empty()) a.mount.fuse_options += (a.mount.fuse_options.empty() ? "" : ",") + o;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "gpucachefs: unknown option %s\n%s", arg.c_str(), kUsage);
      return false;
    } else {
      positional.push_back(arg);
    }
  }
  size_t want = a.defaults ? 1 : 2;
  if (positional.size() != want) {
    std::fputs(kUsage, stderr);
    return false;
  }
  if (!a.defaults) {
    // Absolute, like the mountpoint: a reload (SIGHUP) re-reads it after the move to /. Links
    // are kept, not resolved: a reload reads whatever the link names then (a ConfigMap, an
    // `ln -sfn` deployment), as an operator who moved the link expects.
    std::error_code ec;
    std::filesystem::path config = std::filesystem::absolute(positional[0], ec);
    a.config = ec ? positional[0] : config.lexically_normal().string();
  }
  // Absolute: the daemon changes directory to / when it detaches, and unmounts by this path.
  char* real = ::realpath(positional.back().c_str(), nullptr);
  if (!real) {
    std::fprintf(stderr, "gpucachefs: mountpoint %s: %s\n", positional.back().c_str(),
                 errno == ENOTCONN ? StaleMountHint(positional.back()).c_str() : std::strerror(errno));
    return false;
  }
  a.mount.mountpoint = real;
  std::free(real);
  struct stat st;
  if (::stat(a.mount.mountpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "gpucachefs: mountpoint %s: %s\n", a.mount.mountpoint.c_str(),
                 errno == ENOTCONN ? StaleMountHint(a.mount.mountpoint).c_str() : "not a directory");
    return false;
  }
  // A mount made over a gpucachefs that answers would hide it from the engines using it.
  if (auto served = gpucache::ctl::FindGpucacheMount(a.mount.mountpoint); served && served->inside.empty()) {
    std::fprintf(stderr, "gpucachefs: mountpoint %s: another gpucachefs serves it (a mount over it would "
                 "hide it from its engines); unmount it first (fusermount3 -u %s)\n",
                 a.mount.mountpoint.c_str(), a.mount.mountpoint.c_str());
    return false;
  }
  return true;
}

// The daemon holds one descriptor per open block and per fill. systemd's unit raises the limit
// (LimitNOFILE), but mount(8), fstab and a manual start inherit the login's soft 1024: take the
// hard limit, which needs no privilege, and say what it is.
void RaiseFdLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  rlim_t was = r.rlim_cur;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &r) != 0) r.rlim_cur = was;
  }
  if (r.rlim_cur == was) {
    spdlog::info("file descriptors: limit {} (hard {})", static_cast<uint64_t>(r.rlim_cur),
                 static_cast<uint64_t>(r.rlim_max));
  } else {
    spdlog::info("file descriptors: limit raised from {} to {}", static_cast<uint64_t>(was),
                 static_cast<uint64_t>(r.rlim_cur));
  }
}

// Files under the mountpoint stay on disk, hidden while the mount is up: an operator who
// mounted on the wrong directory hears of it.
void WarnIfNotEmpty(const std::string& mountpoint) {
  std::error_code ec;
  std::filesystem::directory_iterator it(mountpoint, ec);
  if (!ec && it != std::filesystem::directory_iterator()) {
    spdlog::warn("mountpoint {} is not empty: what it holds ({} and more) is hidden while gpucache is "
                 "mounted there", mountpoint, it->path().filename().string());
  }
}

// What start-up checks of a loaded configuration beyond LoadConfig, before it touches a data
// directory: a refused start changes nothing on disk (no epoch bump).
// `mountpoint` empty: not known (--check-config CONFIG without one).
bool CheckStartable(const gpucache::Config& config, const std::string& mountpoint, std::string* error) {
  if (std::string why = gpucache::DataDirsOverlap(config.data_dirs); !why.empty()) {
    *error = why;
    return false;
  }
  for (const std::string& dir : config.data_dirs) {
    std::string why = gpucache::DataDirRefusal(dir);
    if (why.empty()) why = gpucache::UnmountedParentRefusal(dir);
    if (why.empty() && !mountpoint.empty()) why = gpucache::MountpointClash(dir, mountpoint);
    if (!why.empty()) {
      *error = why;
      return false;
    }
  }
  if (config.cold.enabled && !gpucache::DaemonCold::CheckOptions(config.cold, error)) return false;
  if (!config.metrics_listen.empty() && !config.metrics_token_file.empty() &&
      !gpucache::LoadMetricsToken(config.metrics_token_file, error)) {
    return false;
  }
  return true;
}

// What start-up (and --check-config with a mountpoint) checks of the mountpoint beyond the
// configuration, before it is mounted: not a data directory of any gpucache, and not hiding
// files unsaid.
bool CheckMountpoint(const std::string& mountpoint, std::string* error) {
  if (std::string why = gpucache::MountpointInDataDir(mountpoint); !why.empty()) {
    *error = why;
    return false;
  }
  return true;
}

// The RAM tier (adr/0020) when `[ram] bytes` asks for one and its tmpfs can be mounted; otherwise
// the daemon serves every read itself, as without the tier, and the log says why.
void UseRamTier(const gpucache::Config& config, gpucache::Filesystem& fs, gpucache::BlockStore& store) {
  if (config.ram_bytes == 0) {
    spdlog::info("RAM tier: off ([ram] bytes = 0)");
    return;
  }
  std::string why;
  gpucache::Fd dir = gpucache::MountRamDir(config.ram_bytes, &why);
  if (!dir.valid()) {
    spdlog::warn("RAM tier: off: {}", why);
    return;
  }
  // Each copy holds a descriptor: a quarter of the daemon's at most, the rest for the store's
  // open blocks and fills (tiny blocks in a large tier would otherwise take them all).
  rlimit fds{};
  const size_t max_copies = ::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY
                                ? std::max<size_t>(16, static_cast<size_t>(fds.rlim_cur / 4))
                                : gpucache::RamTier::kNoCopyLimit;
  fs.UseRam(std::make_unique<gpucache::RamServing>(
      store,
      std::make_unique<gpucache::RamTier>(std::move(dir), config.ram_bytes, gpucache::Env::Posix(), max_copies),
      config.PromoteOnCommit()));
  spdlog::info("RAM tier: {} bytes in a private tmpfs, at most {} copies (a quarter of the file "
               "descriptors), blocks copied on {}; passthrough is decided when the kernel answers the mount",
               config.ram_bytes, max_copies, config.PromoteOnCommit() ? "read and on commit" : "read");
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena for every thread. A thread's own arena keeps the pages of what that thread
  // freed resident after it is gone (the start's background walk left about 1.4 MB, 14 B a
  // block at 100,000 blocks: docs/performance.md, "Daemon memory"); the daemon's threads
  // allocate little on the data path, and small allocations go through each thread's tcache
  // without the arena's lock. MALLOC_ARENA_MAX in the environment still decides.
  if (::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 1);
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("gpucachefs %s\n", GPUCACHE_VERSION);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--help") == 0) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--print-default-config") == 0) {
    std::fputs(gpucache::DefaultConfigText().c_str(), stdout);
    return 0;
  }
  if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "--check-config") == 0) {
    // Exactly what start-up refuses of a configuration (LoadConfig, then CheckStartable), the
    // mountpoint's relation to the data directories included when it is given.
    try {
      gpucache::Config config = gpucache::LoadConfig(argv[2]);
      std::string error;
      if (!CheckStartable(config, argc == 4 ? argv[3] : "", &error) ||
          (argc == 4 && !CheckMountpoint(argv[3], &error))) {
        std::fprintf(stderr, "gpucachefs: configuration error: %s\n", error.c_str());
        return 78;  // EX_CONFIG
      }
      if (std::string warn = gpucache::DataDirsSharingFilesystem(config.data_dirs); !warn.empty()) {
        std::fprintf(stderr, "gpucachefs: warning: %s\n", warn.c_str());
      }
      std::fputs(gpucache::EffectiveConfigText(config).c_str(), stdout);
      return 0;
    } catch (const gpucache::ConfigError& e) {
      std::fprintf(stderr, "gpucachefs: configuration error: %s\n", e.what());
      return 78;  // EX_CONFIG
    }
  }
  Args args;
  if (!ParseArgs(argc, argv, args)) return 64;
  // A SIGHUP during the start is a reload once the mount serves, not the daemon's end (its
  // default: exit 129, which systemd's Restart=on-failure takes for a clean stop).
  gpucache::Reloader::CatchSighupEarly();
  gpucache::InitLogging(!args.log_level.empty() ? args.log_level : args.mount.debug ? "debug" : "info");
  RaiseFdLimit();
  // Tests only: hold the start this long, before the configuration is read.
  if (const char* hold = ::getenv("GPUCACHE_TEST_HOLD_START_MS")) {
    spdlog::info("test: start held for {} ms", hold);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(hold)));
  }

  gpucache::Config config;
  try {
    config = args.defaults ? gpucache::DefaultConfig() : gpucache::LoadConfig(args.config);
  } catch (const gpucache::ConfigError& e) {
    spdlog::error("configuration error: {}", e.what());
    return 78;  // EX_CONFIG
  }

  std::string error;
  if (!CheckStartable(config, args.mount.mountpoint, &error) || !CheckMountpoint(args.mount.mountpoint, &error)) {
    spdlog::error("configuration error: {}", error);
    return 78;  // EX_CONFIG
  }
  WarnIfNotEmpty(args.mount.mountpoint);
  if (std::string warn = gpucache::DataDirsSharingFilesystem(config.data_dirs); !warn.empty()) {
    spdlog::warn("{}", warn);
  }
  // Mount options libfuse refuses are refused now, before any data directory is touched.
  if (!gpucache::CheckMountOptions(args.mount, config.KernelPermissions(), &error)) {
    spdlog::error("{}", error);
    return 1;
  }
  // The metrics socket is bound now, before any data directory is touched: a taken port
  // refuses the start and leaves the epoch alone. It is served once the mount is up.
  gpucache::MetricsHttpServer metrics;
  if (!config.metrics_listen.empty() && !metrics.Bind(config.metrics_listen, &error)) {
    spdlog::error("{}", error);
    return 1;
  }

  gpucache::StoreOptions store_options;
  store_options.limits = gpucache::ResourceLimitsOf(config);
  store_options.sync_commits = config.sync_commits;
  store_options.backing_io = config.backing_io;
  store_options.eviction_policy = config.eviction_policy;
  store_options.reservation_lease_ns = static_cast<uint64_t>(config.reservation_lease * 1e9);
  store_options.min_free_percent = config.min_free_percent;
  store_options.verify_in_background = config.verify_blocks == "background";
  // The walk's thread starts once the daemon has detached (a fork keeps no thread): on_mounted.
  store_options.defer_background_work = true;
  // Tests only: hold the walk this long before it looks at a file (tests/ops/detach_test.cc).
  if (const char* hold = ::getenv("GPUCACHE_TEST_HOLD_WALK_MS")) {
    int ms = std::atoi(hold);
    store_options.before_walk = [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  }
  store_options.walk_finished = [](const gpucache::MediumReport& walk) {
    for (const std::string& p : walk.problems) spdlog::warn("{}", p);
    // The counts an eager start logs ("L blocks loaded, S skipped,"), now final.
    spdlog::info("block files checked in the background in {:.3f} s: {} blocks loaded, {} skipped, "
                 "{} named by INDEX or the journal but missing, {} unchanged since INDEX and the "
                 "journal saw them",
                 double(walk.walk_ns) / 1e9, walk.blocks_loaded, walk.blocks_skipped, walk.missing,
                 walk.from_snapshot);
  };
  gpucache::FileStoreReport report;
  auto store = gpucache::OpenFileStore(config.data_dirs, store_options, &report, &error);
  if (!store) {
    spdlog::error("{}", error);
    return 1;
  }
  for (const std::string& p : report.problems) spdlog::warn("{}", p);
  spdlog::info("backing I/O: {}", gpucache::BackingIoDescription(*store));
  spdlog::info("data {}: epoch {}, {} blocks loaded{}, {} skipped, {} unfinished writes dropped, "
               "{} quarantined awaiting reclaim",
               Join(config.data_dirs), report.epoch, report.blocks_loaded,
               store->Stats().verify_walk_running ? " (their files checked in the background)" : "",
               report.blocks_skipped, report.reservations_dropped, report.quarantined);

  gpucache::Filesystem fs(config, *store);
  fs.metrics().SetBackingIoStats([&store] { return gpucache::BackingIoStatsOf(*store); });
  UseRamTier(config, fs, *store);
  std::unique_ptr<gpucache::DaemonCold> cold;
  if (config.cold.enabled) {
    cold = gpucache::DaemonCold::Create(config.cold, *store, &error);
    if (!cold) {
      spdlog::error("configuration error: {}", error);
      return 78;  // EX_CONFIG
    }
    cold->Wire(fs, *store);
  }
  auto render = [&fs, &cold] { return fs.RenderAllMetrics() + (cold ? cold->Metrics() : ""); };
  // SIGHUP (systemctl reload) re-reads the configuration and applies what can change without a
  // restart (fs/reload.h); it never unmounts (libfuse's own handler would).
  gpucache::ReloadHook reload_hook;
  // With the mountpoint, as at start: a data directory inside it would pass otherwise, be applied
  // nowhere (data_dirs need a restart) and then keep the next start from mounting.
  reload_hook.startable = [mountpoint = args.mount.mountpoint](const gpucache::Config& fresh) {
    std::string why;
    return CheckStartable(fresh, mountpoint, &why) ? std::string() : why;
  };
  if (cold) reload_hook.check = [&cold] { return cold->CheckCredentials(); };
  reload_hook.apply = [&cold, &metrics, &config] {
    if (cold) cold->ApplyCredentials();
    // The token file is read again, as Prometheus re-reads its credentials_file: a token
    // rotated in place takes effect at the reload (its path needs a restart, like listen).
    if (config.metrics_listen.empty() || config.metrics_token_file.empty()) return;
    std::string why;
    if (std::optional<std::string> token = gpucache::LoadMetricsToken(config.metrics_token_file, &why)) {
      metrics.SetToken(std::move(*token));
      spdlog::info("reload: metrics bearer token read again from {}", config.metrics_token_file);
    } else {
      spdlog::error("reload: kept the metrics bearer token: {}", why);
    }
  };
  gpucache::Reloader reloader(args.config, fs, reload_hook);
  args.mount.on_mounted = [&] {
    store->StartBackgroundWork();
    if (cold) cold->Start();
    if (!reloader.Start(&error)) {
      spdlog::error("{}", error);
      return false;
    }
    if (config.metrics_listen.empty()) return true;
    std::string token;
    if (!config.metrics_token_file.empty()) {
      std::optional<std::string> loaded = gpucache::LoadMetricsToken(config.metrics_token_file, &error);
      if (!loaded) {
        spdlog::error("{}", error);
        return false;
      }
      token = std::move(*loaded);
    }
    if (!metrics.Start(render, std::move(token), &error)) {
      spdlog::error("{}", error);
      return false;
    }
    spdlog::info("metrics on http://{}/metrics", config.metrics_listen);
    return true;
  };
  int status = gpucache::RunMount(fs, args.mount);
  // The endpoint reads the filesystem, the cold tier and the store: it stops before they close
  // (a scrape during the store's close crashed the daemon), and a stopped daemon answers no
  // /healthz.
  metrics.Stop();
  // Tests only: hold the close this long (tests/ops/metrics_test.cc).
  if (const char* hold = ::getenv("GPUCACHE_TEST_HOLD_CLOSE_MS")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(hold)));
  }
  return status;
}
