// The mount's readahead window: blocks are read whole, so the kernel should ask for 1 MiB at a
// time, not its 128 KiB default. The daemon raises it through the mount's bdi in sysfs; the
// kernel's INIT reply takes the smaller of the bdi's window and the reply's max_readahead, so
// a raise that the INIT reply undoes is no raise at all (it was, until this test).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <string>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// The bdi's read_ahead_kb of the filesystem mounted at `mnt`, or -1.
long ReadaheadKb(const std::string& mnt) {
  struct stat st {};
  if (::stat(mnt.c_str(), &st) != 0) return -1;
  std::ifstream f("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                  std::to_string(minor(st.st_dev)) + "/read_ahead_kb");
  long kb = -1;
  f >> kb;
  return kb;
}

TEST_CASE("Mount: the kernel reads ahead 1 MiB of a block, not its 128 KiB default") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(client.Commit(id, Payload(2 << 20, 7)) == 0);  // the INIT exchange is long done
  CHECK(ReadaheadKb(m.mnt()) == 1024);
}

}  // namespace
}  // namespace gpucache
