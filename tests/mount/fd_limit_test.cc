// The daemon's file descriptors (issue 13, defect 5): it keeps one per open block and per fill,
// used to inherit a soft limit of 1024 outside systemd, and a full table answered EIO to every
// tenant.
#include <doctest/doctest.h>
#include <errno.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// Starts a daemon with the given RLIMIT_NOFILE, as a login shell or mount(8) would hand it down.
std::unique_ptr<MountedFs> MountWithFdLimit(int soft, int hard, const std::string& limits = "") {
  return std::make_unique<MountedFs>(
      TestConfig(limits), std::vector<std::string>{"prlimit", "--nofile=" + std::to_string(soft) + ":" +
                                                            std::to_string(hard), "--"});
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("Fd limit: the daemon raises its soft limit to the hard one and says so") {
  auto m = MountWithFdLimit(64, 4096);
  std::string limits = ReadText("/proc/" + std::to_string(m->pid()) + "/limits");
  CHECK(limits.find("Max open files            4096                 4096") != std::string::npos);
  CHECK(m->Log().find("file descriptors: limit raised from 64 to 4096") != std::string::npos);
}

TEST_CASE("Fd limit: a full fd table answers EAGAIN, counted and logged once per burst, never EIO") {
  // Nothing to raise to, and a tenant bound above the table, so that one tenant fills it.
  auto m = MountWithFdLimit(80, 80, "max_open_files = 1000");
  MountClient client(m->mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(4096)) == 0);
  std::vector<int> fds;
  std::map<int, int> errors;
  for (int i = 0; i < 200; ++i) {
    int fd = ::open(client.PathOf(id).c_str(), O_RDONLY);
    if (fd >= 0) fds.push_back(fd);
    else errors[errno]++;
  }
  CHECK(fds.size() > 10);          // the table held some
  CHECK(errors[EAGAIN] > 0);       // and then said "retry later"
  CHECK(errors.size() == 1);       // nothing else: no EIO, no ENOENT
  for (int fd : fds) ::close(fd);
  // The block is intact and served again once descriptors are free.
  auto got = client.Read(id);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == Payload(4096));
  std::string metrics = ReadText(m->mnt() + "/.gpucache/metrics");
  CHECK(metrics.find("gpucache_refusals_total{tenant=\"acme\",errno=\"EAGAIN\",reason=\"out of file handles\"} " +
                     std::to_string(errors[EAGAIN])) != std::string::npos);
  CHECK(Count(m->Log(), "out of file descriptors") == 1);
}

// Regression (review, 2026-12-07): one tenant's open blocks (an engine leaking descriptors)
// filled the daemon's table, and every other tenant's commits and reads were EAGAIN. Each
// tenant now holds at most a quarter of it (limits.max_open_files = 0).
TEST_CASE("Fd limit: one tenant's open blocks stop at a quarter of the descriptors, and another tenant still commits and reads") {
  auto m = MountWithFdLimit(128, 128);
  CHECK(Metric(*m, "gpucache_limit{tenant=\"\",limit=\"max_open_files\"}") == 32);
  MountClient client(m->mnt());
  CacheIdentity mine = SampleIdentity();
  REQUIRE(client.Commit(mine, Payload(4096)) == 0);
  std::vector<int> fds;
  std::map<int, int> errors;
  for (int i = 0; i < 200; ++i) {
    int fd = ::open(client.PathOf(mine).c_str(), O_RDONLY);
    if (fd >= 0) fds.push_back(fd);
    else errors[errno]++;
  }
  CHECK(fds.size() == 32);
  CHECK(errors[EAGAIN] == 200 - 32);
  CHECK(Metric(*m, "gpucache_open_blocks{tenant=\"acme\"}") == 32);
  // globex is not held back by acme's descriptors: it commits and reads as before.
  CacheIdentity theirs = SampleIdentity("globex");
  CHECK(AsUser(2000, 2000, [&] { return client.Commit(theirs, Payload(8192, 7)); }) == 0);
  CHECK(AsUser(2000, 2000, [&] {
          auto got = client.Read(theirs);
          return std::holds_alternative<Bytes>(got) && std::get<Bytes>(got) == Payload(8192, 7) ? 0 : 1;
        }) == 0);
  for (int fd : fds) ::close(fd);
  for (int i = 0; i < 500 && Metric(*m, "gpucache_open_blocks{tenant=\"acme\"}") != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // RELEASE follows close() soon after
  }
  CHECK(Metric(*m, "gpucache_open_blocks{tenant=\"acme\"}") == 0);
  auto got = client.Read(mine);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == Payload(4096));
}

// Regression (review, 2026-12-06): each copy in the RAM tier holds a descriptor, and only bytes
// bounded the tier: small blocks copied into it took the descriptors the store needs, and
// commits and reads then failed with EAGAIN for every tenant.
TEST_CASE("Fd limit: the RAM tier's copies take at most a quarter of the descriptors") {
  auto m = std::make_unique<MountedFs>("[ram]\nbytes = 67108864\npromote = \"commit\"\n" + TestConfig(),
                                       std::vector<std::string>{"prlimit", "--nofile=128:128", "--"});
  MountClient client(m->mnt());
  std::vector<CacheIdentity> ids;
  for (int i = 0; i < 150; ++i) {
    CacheIdentity id = SampleIdentity();
    id.chain[0] = Hash(static_cast<uint8_t>(i));
    CAPTURE(i);
    REQUIRE(client.Commit(id, Payload(4096, static_cast<uint8_t>(i))) == 0);
    ids.push_back(id);
  }
  for (int i = 0; i < 500 && Metric(*m, "gpucache_ram_promotions_pending") != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(Metric(*m, "gpucache_ram_copies") > 0);
  CHECK(Metric(*m, "gpucache_ram_copies") <= 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    CAPTURE(i);
    auto got = client.Read(ids[i]);
    REQUIRE(std::holds_alternative<Bytes>(got));
    CHECK(std::get<Bytes>(got) == Payload(4096, static_cast<uint8_t>(i)));
  }
  CHECK(m->Log().find("at most 32 copies") != std::string::npos);
}

}  // namespace
}  // namespace gpucache
