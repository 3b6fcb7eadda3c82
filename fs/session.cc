#include "fs/session.h"

#include <fuse_lowlevel.h>
#include <systemd/sd-daemon.h>

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "fs/fuse_connection.h"
#include "fs/fuse_ops.h"
#include "fs/housekeeper.h"
#include "fs/log.h"
#include "fs/invalidator.h"
#include "fs/stop_watchdog.h"

namespace gpucache {
namespace {

// allow_other: tenants are other uids than the mounting root. default_permissions only with
// fuse.permissions = "kernel"; otherwise the daemon decides access itself (fs/filesystem.h).
// nosuid,nodev: a tenant's block is never a setuid program or a device node; an explicit
// -o suid or -o dev comes later in the list and wins (packaging/mount.fuse.gpucachefs keeps
// mount.fuse3 from adding them behind the operator's back).
constexpr char kBaseOptions[] = "allow_other,nosuid,nodev,fsname=gpucache,subtype=gpucachefs";

struct SessionDeleter {
  void operator()(fuse_session* se) const { fuse_session_destroy(se); }
};

// FUSE passthrough when the RAM tier is on and the kernel offers it (adr/0020); otherwise the
// daemon serves every read, as without the tier, and says once why. The backing files are on a
// tmpfs, which stacks nothing: max_backing_stack_depth stays 0 (libfuse then tells the kernel 1,
// the FUSE layer itself). The kernel refuses passthrough with the writeback cache, which
// gpucachefs never asks for (writes bypass the page cache, adr/0004).
void ChoosePassthrough(Filesystem& fs, fuse_conn_info* conn) {
  RamServing* ram = fs.ram();
  if (!ram) return;  // off: the start logged why
  if (!fuse_set_feature_flag(conn, FUSE_CAP_PASSTHROUGH)) {
    spdlog::warn("RAM tier: passthrough off: the kernel does not offer FUSE passthrough (Linux 6.9 "
                 "and later, CONFIG_FUSE_PASSTHROUGH); the daemon serves every read and copies "
                 "nothing into RAM");
    return;
  }
  ram->SetPassthrough(true);
  spdlog::info("RAM tier: passthrough on: opens of blocks held in RAM are served by the kernel");
}

void OnInit(void* userdata, fuse_conn_info* conn) {
  ChoosePassthrough(*static_cast<Filesystem*>(userdata), conn);
  // Committed blocks are large; fewer, bigger writes make commits cheaper.
  conn->max_write = 1 << 20;
  // max_readahead stays at what the kernel offers (its 128 KiB default). A 1 MiB window made
  // the corruption test's restart hang in 7 of 45 runs: the page invalidation of a block found
  // corrupt waited on a folio that an in-flight readahead READ held (docs/performance.md,
  // "Readahead").
  // Blocks never change under a name, and the daemon invalidates what leaves the namespace
  // itself. Automatic invalidation would only add GETATTR round trips to reads, and turn the
  // EIO of a corrupt block into the ENOENT of a vanished one.
  // (libfuse 3.17 keeps 64 bits of flags in want_ext: the flag functions, not conn->want.)
  fuse_unset_feature_flag(conn, FUSE_CAP_AUTO_INVAL_DATA);
  // No shared mmap of direct-I/O files: the kernel writes a mapping's dirty pages back with no
  // caller's credentials (uid 0), and `.gpucache/ctl` and `.gpucache/commit` authorize each
  // write by its writer: a mapped write would arrive as root. Off in libfuse 3.17; said here
  // so that a libfuse that turns it on by default cannot.
  fuse_unset_feature_flag(conn, FUSE_CAP_DIRECT_IO_ALLOW_MMAP);
}

// Sends kernel invalidations for blocks that disappear behind the kernel's back, and logs the
// ones an operator should hear about.
void WatchRemovals(Filesystem& fs, Invalidator& inval) {
  fs.store().SetRemovalObserver([&fs, &inval](const BlockAddress& a, RemovalReason why,
                                              std::string_view detail) {
    if (why == RemovalReason::kCorrupt) {
      // Names what failed and where the file went (the data directory is in its path).
      spdlog::warn("checksum mismatch: {} removed from the namespace (EIO to its reader); failed: {}",
                   a.RelativePath(), detail);
    } else if (why == RemovalReason::kLost && !detail.empty()) {
      spdlog::warn("block file missing: {} removed from the namespace (a miss from now on): {}",
                   a.RelativePath(), detail);
    } else {
      spdlog::debug("{}: {}", ToString(why), a.RelativePath());
    }
    // Its RAM copy goes (passthrough files already open keep theirs), and its name no longer
    // leads to its inode.
    std::optional<uint64_t> ino = fs.BlockLeft(a);
    auto dir = fs.inodes().Find(Node{NodeKind::kNamespace, a.tenant, a.ns});
    if (!dir) return;  // the kernel never saw the directory: nothing cached
    // Corruption is found by a reader (open, read, getxattr: none holds the directory's lock),
    // and its EIO must not be followed by a stat that still succeeds from the cache (issue 13).
    // Evictions and invalidations come from commits and unlinks in the same directory: queued.
    // Only the entry, though: the reader of a corrupt block may hold its page locked while it
    // waits for this very reply, so the pages are dropped from the queue.
    if (why == RemovalReason::kCorrupt) {
      inval.Now(*dir, a.block, 0);
      if (ino) inval.Push(*dir, a.block, *ino);
    } else {
      inval.Push(*dir, a.block, ino.value_or(0));
    }
  });
  // A block copied into the RAM tier: the pages its daemon-served reads cached are dropped from
  // the invalidator's thread, not inside its first passthrough open (RamServing::SetDropPagesHandler).
  if (RamServing* ram = fs.ram()) ram->SetDropPagesHandler([&inval](uint64_t ino) { inval.PushPages(ino); });
  // A block that appeared without a rename through the mount (a cold-tier refill, from the
  // control channel or its workers): the kernel may hold a miss for the block and, if the
  // namespace did not exist when it was probed, for the namespace too (issue 13, defect 7).
  // A block committed through the commit channel (adr/0022): the same, queued (Filesystem::BlockAppeared).
  fs.SetAppearedHandler([&fs, &inval](const BlockAddress& a, bool now) {
    auto send = [&](uint64_t dir, const std::string& name) {
      if (now) inval.Now(dir, name, 0);
      else inval.Push(dir, name, 0);
    };
    if (auto tenant = fs.inodes().Find(Node{NodeKind::kTenant, a.tenant})) {
      if (!fs.inodes().Find(Node{NodeKind::kNamespace, a.tenant, a.ns})) send(*tenant, a.ns);
    }
    if (auto dir = fs.inodes().Find(Node{NodeKind::kNamespace, a.tenant, a.ns})) send(*dir, a.block);
  });
}

// The signals libfuse's handler turns into the end of the loop. libfuse 3.17 only sets a flag
// there: the handler wakes the loop only when it runs on the thread that waits in
// fuse_session_loop_mt (its sem_wait returns EINTR). Run on any other thread, it leaves the
// loop asleep until the next FUSE request, and a SIGTERM right after READY=1 never ended the
// daemon (CI, stop 32). So every thread the daemon starts blocks them, and only the loop's
// thread takes them; one that arrives while it blocks them waits until the loop begins.
class TeardownSignalsBlocked {
 public:
  TeardownSignalsBlocked() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGHUP, SIGINT, SIGTERM}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, &saved_);
  }
  ~TeardownSignalsBlocked() { Restore(); }
  void Restore() {
    if (restored_) return;
    restored_ = true;
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }

 private:
  sigset_t saved_;
  bool restored_ = false;
};

}  // namespace

namespace {

// The -o list libfuse is given: gpucache's defaults, then the operator's.
std::string FuseOptionsOf(const MountOptions& options, bool kernel_permissions) {
  std::string opts = kBaseOptions;
  if (kernel_permissions) opts += ",default_permissions";
  if (!options.fuse_options.empty()) opts += "," + options.fuse_options;
  return opts;
}

// A session (not mounted) for `ops`, or null if libfuse refuses the options.
std::unique_ptr<fuse_session, SessionDeleter> NewSession(const MountOptions& options, bool kernel_permissions,
                                                         const fuse_lowlevel_ops& ops, void* userdata) {
  std::vector<std::string> argv_s = {"gpucachefs", "-o", FuseOptionsOf(options, kernel_permissions)};
  if (options.debug) argv_s.push_back("-d");
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  std::unique_ptr<fuse_session, SessionDeleter> se(fuse_session_new(&args, &ops, sizeof ops, userdata));
  fuse_opt_free_args(&args);
  return se;
}

}  // namespace

bool CheckMountOptions(const MountOptions& options, bool kernel_permissions, std::string* error) {
  fuse_lowlevel_ops none{};
  if (NewSession(options, kernel_permissions, none, nullptr)) return true;
  *error = "invalid FUSE options: " + FuseOptionsOf(options, kernel_permissions);
  return false;
}

int RunMount(Filesystem& fs, const MountOptions& options) {
  fuse_lowlevel_ops ops = FuseOperations();
  ops.init = OnInit;
  std::unique_ptr<fuse_session, SessionDeleter> se = NewSession(options, fs.KernelPermissions(), ops, &fs);
  if (!se) {
    spdlog::error("invalid FUSE options: {}", FuseOptionsOf(options, fs.KernelPermissions()));
    return 1;
  }
  // Threads started from here on (on_mounted, the invalidator, the housekeeper, the RAM
  // promoter) inherit the mask; the loop's thread unblocks the signals just before the loop.
  TeardownSignalsBlocked blocked;
  if (fuse_set_signal_handlers(se.get()) != 0) return 1;
  if (fuse_session_mount(se.get(), options.mountpoint.c_str()) != 0) {
    spdlog::error("cannot mount at {}", options.mountpoint);
    fuse_remove_signal_handlers(se.get());
    return 1;
  }
  spdlog::info("mounted at {}", options.mountpoint);
  fuse_daemonize(options.foreground || options.debug);
  if (!options.foreground && !options.debug) SwitchToSyslog();
  // After the fork: the pid recorded is the daemon's (fs/fuse_connection.h).
  std::optional<FuseConnection> connection = FuseConnection::Find(options.mountpoint);
  if (connection && !connection->Record(::getpid())) {
    connection->Forget();  // a record of an earlier daemon on this minor would name a dead pid
    spdlog::warn("cannot record the FUSE connection in /run/gpucache: if this daemon is killed while "
                 "it cannot exit, gpucache-unmount-stale will not clear its mount");
  }
  if (options.on_mounted && !options.on_mounted()) {
    fuse_session_unmount(se.get());
    fuse_remove_signal_handlers(se.get());
    return 1;
  }

  Invalidator inval;  // threads start after daemonize, which forks
  inval.Start(se.get());
  WatchRemovals(fs, inval);
  Housekeeper housekeeper(fs.store());
  housekeeper.Start();
  if (fs.ram()) fs.ram()->Start();
  // Ready only now: configuration and data directories were checked before the mount, and the
  // mount is up (Type=notify units wait for this).
  sd_notifyf(0, "READY=1\nSTATUS=serving %s, epoch %llu", options.mountpoint.c_str(),
             static_cast<unsigned long long>(fs.store().Epoch()));

  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 1);
  fuse_loop_cfg_set_idle_threads(cfg, 10);
  // libfuse's default, made explicit: Filesystem::kMaxNoticesNow and kMaxDeferredInAll are
  // counted against it.
  fuse_loop_cfg_set_max_threads(cfg, 10);
  std::optional<StopWatchdog> watchdog;
  if (connection) {
    // The loop also stops when someone else unmounted or aborted the mount: its connection is
    // then gone, and its minor may be another mount's by now. Aborted only while it is ours.
    auto abort_ours = [&connection, &options] {
      std::optional<FuseConnection> now = FuseConnection::Find(options.mountpoint);
      if (now && now->minor == connection->minor) {
        connection->Abort();
      } else {
        spdlog::info("stop: the mount is gone already (unmounted or aborted elsewhere): nothing to abort");
      }
    };
    watchdog.emplace([s = se.get()] { return fuse_session_exited(s) != 0; }, abort_ours,
                     StopWatchdog::DeadlineFromEnv());
  }
  blocked.Restore();  // a signal that came since is delivered here and ends the loop at once
  int rc = fuse_session_loop_mt(se.get(), cfg);
  if (watchdog) watchdog->LoopReturned();
  fuse_loop_cfg_destroy(cfg);
  // libfuse reports the signal that ended the loop; an ordered stop is success.
  bool clean = rc == 0 || rc == SIGINT || rc == SIGTERM || rc == SIGHUP;
  sd_notify(0, "STOPPING=1");

  housekeeper.Stop();
  if (fs.ram()) {
    fs.ram()->Stop();
    fs.ram()->SetDropPagesHandler(nullptr);  // it holds `inval`
  }
  fs.store().SetRemovalObserver(nullptr);
  fs.SetAppearedHandler(nullptr);
  // Requests still waiting now get no answer: an invalidation waiting for a directory's lock
  // that one of them holds would wait forever, and the daemon with it (seen under load at
  // SIGTERM). Aborting the connection fails those requests, which releases the lock.
  if (!inval.StopWithin(std::chrono::seconds(2)) && connection) {
    spdlog::warn("an invalidation is still waiting in the kernel: aborting the FUSE connection "
                 "(requests still waiting get ECONNABORTED)");
    connection->Abort();
  }
  inval.Stop();
  // Before the unmount: after it, another daemon may mount with this minor and record it.
  if (connection) connection->Forget(::getpid());
  fuse_session_unmount(se.get());
  fuse_remove_signal_handlers(se.get());
  spdlog::info("unmounted {}", options.mountpoint);
  return clean ? 0 : 1;
}

}  // namespace gpucache
