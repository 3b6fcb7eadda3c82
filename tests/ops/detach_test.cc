// A daemon that detaches (no -f) forks after it opened the store. The start's background walk
// (adr/0016) ran on a thread started before that fork, which the child does not have: when the
// walk had not finished by the fork, it never did, and every namespace listing waited for it
// forever (seen as a hang of the user guide's `ls -l` on a loaded machine). The walk now starts
// after the fork; GPUCACHE_TEST_HOLD_WALK_MS makes it slower than the fork on purpose.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

int Sh(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("Detached start: the background walk finishes after the fork, and listings answer") {
  std::string config, mnt, ns_dir;
  auto m = std::make_unique<MountedFs>();
  MountClient client(m->mnt());
  CacheIdentity id = SampleIdentity("acme", 5);
  REQUIRE(client.Commit(id, Payload(2000)) == 0);
  ns_dir = NsDir(*m, id).substr(m->mnt().size());
  config = m->config();
  mnt = m->mnt();
  REQUIRE(m->Stop() == 0);  // a clean close: INDEX names the block, so the next start walks
  // Detached (no -f), its walk held 1 s: the fork happens well before the walk starts.
  REQUIRE(Sh("GPUCACHE_TEST_HOLD_WALK_MS=1000 " GPUCACHEFS_BIN " " + config + " " + mnt) == 0);
  int listed = Sh("timeout -s KILL 20 ls " + mnt + ns_dir + " >/dev/null");
  CHECK(listed == 0);  // 137: the listing waited for a walk that never ran
  // Killed, not asked: a daemon whose walk never ran would keep a listing waiting.
  Sh("pkill -KILL -f '^" GPUCACHEFS_BIN " " + config + "'; fusermount3 -u -z " + mnt);
}

}  // namespace gpucache
