// The daemon's log as an operator audits it (docs/metrics.md, "Logs an operator can audit"):
// admin actions with who asked and the outcome, pins, and the backing I/O in use at start.
#include <doctest/doctest.h>

#include <chrono>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// A committed block of acme in `m`: its path relative to the mount.
std::string CommitOne(MountedFs& m) {
  MountClient client(m.mnt());
  std::string path = client.PathOf(SampleIdentity());
  REQUIRE(client.Commit(SampleIdentity(), Payload(1000)) == 0);
  return path.substr(m.mnt().size() + 1);
}

TEST_CASE("Logs: admin actions and pins name the caller's uid and the outcome") {
  MountedFs m;
  std::string rel = CommitOne(m);
  std::string path = m.mnt() + "/" + rel;

  CHECK(Control(m, R"({"op":"fence"})").find("\"ok\":true") != std::string::npos);
  // A refused admin request is logged too, with the refusal.
  CHECK(AsUser(1000, 1000, [&] {
          return Control(m, R"({"op":"evict","path":")" + rel + "\"}").find("EACCES") != std::string::npos ? 0 : 1;
        }) == 0);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::setxattr(path.c_str(), "user.gpucache.pinned", "1", 1, 0)); }) == 0);
  // Reads are not actions: no line for them.
  CHECK(Control(m, R"({"op":"status"})").find("\"ok\":true") != std::string::npos);
  // The cold tier's rewriting and deleting ops are actions too (refused here: no cold tier).
  CHECK(Control(m, R"({"op":"cold.reseal"})").find("ENOTSUP") != std::string::npos);
  CHECK(Control(m, R"({"op":"cold.purge_tenant","tenant":"acme"})").find("ENOTSUP") != std::string::npos);

  std::string log = m.Log();
  CHECK(log.find("backing I/O: posix") != std::string::npos);
  CHECK(log.find("control: uid 0 gid 0 asked {\"op\":\"fence\"} -> {\"epoch\":") != std::string::npos);
  CHECK(log.find("control: uid 1000 gid 1000 asked {\"op\":\"evict\",\"path\":\"" + rel +
                 "\"} -> {\"errno\":\"EACCES\"") != std::string::npos);
  CHECK(log.find("xattr: uid 1000 gid 1000 pinned " + rel) != std::string::npos);
  CHECK(log.find("control: uid 0 gid 0 asked {\"op\":\"cold.reseal\"} -> {\"errno\":\"ENOTSUP\"") !=
        std::string::npos);
  CHECK(log.find("control: uid 0 gid 0 asked {\"op\":\"cold.purge_tenant\",\"tenant\":\"acme\"} -> "
                 "{\"errno\":\"ENOTSUP\"") != std::string::npos);
  CHECK(log.find("\"op\":\"status\"") == std::string::npos);
}

TEST_CASE("Logs: a member's pins are logged at most ten lines a second, the rest counted") {
  MountedFs m;
  std::string rel = CommitOne(m);
  std::string path = m.mnt() + "/" + rel;
  size_t before = m.Log().size();
  auto start = std::chrono::steady_clock::now();
  // 400 pins and unpins by xattr and through the control file, as a busy engine sends them.
  CHECK(AsUser(1000, 1000, [&] {
          for (int i = 0; i < 200; i++) {
            if (::setxattr(path.c_str(), "user.gpucache.pinned", i % 2 ? "0" : "1", 1, 0) != 0) return 1;
            std::string reply = Control(m, std::string(R"({"op":")") + (i % 2 ? "unpin" : "pin") +
                                               R"(","path":")" + rel + "\"}");
            if (reply.find("\"ok\":true") == std::string::npos) return 2;
          }
          return 0;
        }) == 0);
  std::string log = m.Log().substr(before);
  size_t lines = 0;
  for (size_t at = log.find("uid 1000 gid 1000"); at != std::string::npos; at = log.find("uid 1000 gid 1000", at + 1)) ++lines;
  CHECK(lines >= 1);
  // Ten a second and a summary line each second (400 before); on a loaded machine the 400 calls
  // took 19 s, so the bound is the run's own length.
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(lines <= static_cast<size_t>(11 * (seconds + 1)));
  CHECK(lines < 400);
  std::string metrics = ReadText(m.mnt() + "/.gpucache/metrics");
  CHECK(metrics.find("gpucache_log_lines_suppressed_total 0\n") == std::string::npos);
  CHECK(metrics.find("gpucache_log_lines_suppressed_total") != std::string::npos);
  // An admin's actions are all logged.
  for (int i = 0; i < 5; i++) Control(m, R"({"op":"pin","path":")" + rel + "\"}");
  CHECK(m.Log().find("control: uid 0 gid 0 asked {\"op\":\"pin\"") != std::string::npos);
}

}  // namespace
}  // namespace gpucache
