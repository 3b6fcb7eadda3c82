// The daemon when the kernel aborts its connection (fusectl's `abort`, what an administrator
// does to a hung mount): requests in flight are answered into a closed connection, and the
// daemon must still end its loop and exit as after an unmount, not crash.
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

}  // namespace
}  // namespace gpucache
