// The hardened unit (packaging/gpucachefs.service): its systemd-analyze score, and the daemon
// started under the unit's restrictions (tests/ops/unit_sandbox.cc applies the ones that need
// no systemd as PID 1) mounts, commits, reads and unmounts.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

const std::string kUnit = GPUCACHE_SOURCE_DIR "/packaging/gpucachefs.service";

std::string Output(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string StatusField(pid_t pid, const std::string& field) {
  std::string status = ReadText("/proc/" + std::to_string(pid) + "/status");
  size_t at = status.find("\n" + field + ":");
  if (at == std::string::npos) return "";
  size_t begin = status.find_first_not_of(" \t", at + field.size() + 2);
  return status.substr(begin, status.find('\n', begin) - begin);
}

std::string Sandboxed(const std::string& command) {
  return std::string(UNIT_SANDBOX_BIN) + " " + kUnit + " -- " + command;
}

TEST_CASE("hardening: systemd-analyze security rates the unit 4.5 or better") {
  std::string report = Output("systemd-analyze security --offline=true --no-pager " + kUnit + " 2>&1");
  size_t at = report.find("Overall exposure level for gpucachefs.service: ");
  REQUIRE_MESSAGE(at != std::string::npos, report);
  double score = std::strtod(report.c_str() + at + 47, nullptr);
  MESSAGE("exposure " << score);
  CHECK(score > 0);
  CHECK(score <= 4.5);
}

TEST_CASE("hardening: the sandbox applies the unit's restrictions (a process under it cannot unshare)") {
  CHECK(std::system(Sandboxed("true").c_str()) == 0);
  CHECK(std::system(Sandboxed("unshare -m true 2>/dev/null").c_str()) != 0);  // RestrictNamespaces
  CHECK(std::system("unshare -m true") == 0);                                // but root outside can
  std::string status = Output(Sandboxed("cat /proc/self/status"));
  CHECK(status.find("NoNewPrivs:\t1") != std::string::npos);
  CHECK(status.find("Seccomp:\t2") != std::string::npos);
  // CAP_CHOWN (0), CAP_DAC_OVERRIDE (1), CAP_SYS_ADMIN (21): nothing else, even for root.
  CHECK(status.find("CapBnd:\t0000000000200003") != std::string::npos);
  CHECK(status.find("CapEff:\t0000000000200003") != std::string::npos);
}

TEST_CASE("hardening: under the unit's restrictions the daemon mounts, commits, reads and unmounts") {
  MountedFs m(TestConfig(), {UNIT_SANDBOX_BIN, kUnit, "--"});
  CHECK(StatusField(m.pid(), "NoNewPrivs") == "1");
  CHECK(StatusField(m.pid(), "Seccomp") == "2");
  CHECK(StatusField(m.pid(), "CapEff") == "0000000000200003");
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(65536)) == 0);
  auto got = client.Read(id);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == Payload(65536));
  // A tenant other than root: the namespace directory chowned to it, then written as root.
  CHECK(AsUser(2000, 2000, [&] {
          MountClient c(m.mnt());
          return c.Commit(SampleIdentity("globex"), Payload(4096));
        }) == 0);
  // UMask=0077: the block files are the daemon's alone.
  std::string listing = Output("find " + m.data() + " -type f -perm /077");
  CHECK(listing.empty());
  // ExecStopPost= (unmount-stale) runs under the same restrictions and leaves a mount that
  // answers; SIGTERM, what systemctl stop sends, unmounts and ends the daemon.
  CHECK(std::system(Sandboxed(GPUCACHE_SOURCE_DIR "/packaging/gpucache-unmount-stale " + m.mnt()).c_str()) == 0);
  CHECK(m.Mounted());
  ::kill(m.pid(), SIGTERM);
  CHECK(m.WaitForExit() == 0);
  CHECK_FALSE(m.Mounted());
}

}  // namespace
}  // namespace gpucache
