// The daemon when the kernel aborts its connection (fusectl's `abort`, what an administrator
// does to a hung mount): requests in flight are answered into a closed connection, and the
// daemon must still end its loop and exit as after an unmount, not crash. And the daemon that
// aborts its own connection when its stop cannot finish (fs/stop_watchdog.h).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// /sys/fs/fuse/connections, mounted if it is not (as root).
bool FuseControlMounted() {
  const std::string dir = "/sys/fs/fuse/connections";
  if (!std::filesystem::exists(dir)) return false;
  ::mount("fusectl", dir.c_str(), "fusectl", 0, nullptr);  // EBUSY when it is already there
  return true;
}

// Regression (review, 2026-12-06): fuse_reply_open frees its request whether or not the kernel
// took the reply, and the undo of a failed reply called Fs(req) on the freed request. An OPEN
// answered after the connection was aborted crashed the daemon (SIGSEGV) instead of letting it
// exit. GPUCACHE_TEST_HOLD_OPEN_MS holds every OPEN before its reply long enough to abort.
TEST_CASE("Mount: an open answered after the connection was aborted lets the daemon exit, not crash") {
  REQUIRE_MESSAGE(FuseControlMounted(), "fusectl (/sys/fs/fuse/connections) is needed to abort a connection");
  MountedFs m(TestConfig(), {"env", "GPUCACHE_TEST_HOLD_OPEN_MS=1500"});
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(client.Commit(id, Payload(4096)) == 0);
  struct stat root {};
  REQUIRE(::stat(m.mnt().c_str(), &root) == 0);
  const std::string abort = "/sys/fs/fuse/connections/" + std::to_string(minor(root.st_dev)) + "/abort";
  REQUIRE(std::filesystem::exists(abort));

  pid_t reader = ::fork();
  if (reader == 0) {
    int fd = ::open(client.PathOf(id).c_str(), O_RDONLY);  // held in the daemon, then aborted
    ::_exit(fd >= 0 ? 0 : 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the OPEN is in the daemon
  { std::ofstream(abort) << "1"; }
  int status = 0;
  ::waitpid(reader, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);  // the reader saw its open fail (ENOTCONN)
  // The held OPEN's reply fails once the hold ends; the daemon exits as after an unmount.
  CHECK(m.WaitForExit() != -1);
  CHECK(m.Log().find("unmounted " + m.mnt()) != std::string::npos);  // its shutdown ran to the end
}

// Regression (2026-12-07): a commit frame's entry invalidation, sent while the daemon stopped,
// waited for its namespace directory's lock, held by a LOOKUP that no thread was left to
// answer. The FUSE loop waits for every request thread, so SIGTERM never ended the daemon (and
// the unit's SIGKILL would leave a process that cannot exit holding the mount). The frame is
// held after its commit (GPUCACHE_TEST_HOLD_APPEARED_MS) while the daemon is stopped and the
// LOOKUP comes; the watchdog aborts the connection 3 s after the stop began. Aborted requests
// fail with ECONNABORTED.
TEST_CASE("Mount: a stop held by a request waiting in the kernel aborts its own connection and exits") {
  REQUIRE_MESSAGE(FuseControlMounted(), "fusectl (/sys/fs/fuse/connections) is needed to abort a connection");
  MountedFs m(TestConfig(), {"env", "GPUCACHE_TEST_HOLD_APPEARED_MS=1500", "GPUCACHE_STOP_ABORT_MS=3000"});
  MountClient client(m.mnt());
  CacheIdentity first = SampleIdentity("acme", 1), held = SampleIdentity("acme", 2);
  REQUIRE(client.Commit(first, Payload(4096)) == 0);
  struct stat st {};
  REQUIRE(::stat(NsDir(m, held).c_str(), &st) == 0);  // the kernel knows the directory
  // The prober stands in the namespace directory, so that its probe sends one LOOKUP there and
  // no other (a path from the root may stop at the first entry the kernel revalidates).
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t prober = ::fork();
  if (prober == 0) {
    char c;
    if (::chdir(NsDir(m, held).c_str()) != 0 || ::read(go[0], &c, 1) != 1) ::_exit(3);
    struct stat p {};
    int rc = ::stat("never-looked-up", &p);
    ::_exit(rc == 0 ? 0 : errno == ECONNABORTED ? 1 : 2);
  }
  int committed = -1;
  std::thread committer([&] { committed = client.Commit(held, Payload(4096)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // committed, held before the notice
  REQUIRE(::kill(m.pid(), SIGTERM) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the loop no longer reads requests
  REQUIRE(::write(go[1], "g", 1) == 1);  // the LOOKUP: holds the directory's lock, unanswered
  const auto stopped = std::chrono::steady_clock::now();
  int status = m.WaitForExit();  // 10 s at most, then SIGKILL
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  CHECK_MESSAGE(status == 0, m.Log());
  CHECK(m.Log().find("aborting the FUSE connection") != std::string::npos);
  CHECK(m.Log().find("unmounted " + m.mnt()) != std::string::npos);
  int probed = 0;
  for (int i = 0; i < 100 && ::waitpid(prober, &probed, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (::waitpid(prober, &probed, WNOHANG) == 0) {
    ::kill(prober, SIGKILL);  // the old daemon: its LOOKUP is never answered
    ::waitpid(prober, &probed, 0);
  }
  CHECK(WIFEXITED(probed));
  CHECK(WEXITSTATUS(probed) == 1);  // the LOOKUP nobody would answer failed: ECONNABORTED
  committer.join();
  ::close(go[0]);
  ::close(go[1]);
  CHECK(committed == ECONNABORTED);  // its reply never reached the writer: not told it committed
  MESSAGE("stopped in ", seconds, " s");
}

}  // namespace
}  // namespace gpucache
