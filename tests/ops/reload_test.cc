// Live reload (docs/configuration.md, "Reloading"): SIGHUP re-reads tenants, admins, limits and
// quotas without unmounting or fencing; a bad file changes nothing and the log says why.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;
using nlohmann::json;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Sends SIGHUP and waits for the reload's verdict in the log (either way). Returns the log.
std::string Hangup(MountedFs& m) {
  size_t before = Count(m.Log(), "reload: ");
  REQUIRE(::kill(m.pid(), SIGHUP) == 0);
  for (int i = 0; i < 500 && Count(m.Log(), "reload: ") == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string log = m.Log();
  REQUIRE_MESSAGE(Count(log, "reload: ") > before, log);
  return log;
}

// Rewrites the daemon's configuration file and reloads it.
std::string Reload(MountedFs& m, const std::string& body) {
  std::ofstream(m.config()) << "data_dir = \"" << m.data() << "\"\n" << body;
  return Hangup(m);
}

int CommitAs(uid_t uid, const MountedFs& m, const CacheIdentity& id, size_t bytes) {
  return AsUser(uid, uid, [&] { return MountClient(m.mnt()).Commit(id, Payload(bytes)); });
}

// acme loses uid 1000 and gets a quota below one block, globex is dropped, initech = {3000}
// is added.
std::string Reloaded() {
  return "[admins]\nuids = [0]\n"
         "[tenants.acme]\nuids = [0]\nmax_retained_bytes = 50000\n"
         "[tenants.initech]\nuids = [3000]\n"
         "[metrics]\nlisten = \"\"\n";
}

TEST_CASE("Reload: a good file adds and removes tenants and changes quotas, a fill in flight commits") {
  MountedFs m;
  MountClient root(m.mnt());
  CacheIdentity inflight = SampleIdentity("acme", 2);
  // A fill in flight across the reload: created and half written before, finished after.
  std::string part = root.PathOf(inflight) + ".part";
  REQUIRE(::mkdir(NsDir(m, inflight).c_str(), 0770) == 0);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  Bytes ident = EncodePhysicalKey(inflight);
  REQUIRE(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), 0) == 0);
  Bytes payload = Payload(40000);
  REQUIRE(::write(fd, payload.data(), 20000) == 20000);
  uint64_t epoch = std::stoull(ReadText(m.mnt() + "/.gpucache/epoch"));

  CHECK(CommitAs(3000, m, SampleIdentity("initech"), 1000) == ENOENT);  // not a tenant yet
  CHECK(CommitAs(2000, m, SampleIdentity("globex", 3), 1000) == 0);
  CHECK(CommitAs(1000, m, SampleIdentity("acme", 6), 1000) == 0);

  std::string log = Reload(m, Reloaded());
  CHECK(log.find("reload: configuration reloaded from " + m.config()) != std::string::npos);
  CHECK(m.Mounted());
  CHECK(std::stoull(ReadText(m.mnt() + "/.gpucache/epoch")) == epoch);  // nothing was fenced

  // The fill in flight goes on and commits.
  REQUIRE(::write(fd, payload.data() + 20000, 20000) == 20000);
  REQUIRE(::close(fd) == 0);
  CHECK(::rename(part.c_str(), root.PathOf(inflight).c_str()) == 0);
  CHECK(std::get<Bytes>(root.Read(inflight)) == payload);

  // The new tenant's member commits; the uid removed from acme is refused (EACCES), and the
  // removed tenant is gone for its former member, as a tenant never configured is (ENOENT).
  CHECK(CommitAs(3000, m, SampleIdentity("initech"), 1000) == 0);
  CHECK(CommitAs(1000, m, SampleIdentity("acme", 7), 1000) == EACCES);
  CHECK(AsUser(1000, 1000, [&] { return Errno(::access((m.mnt() + "/acme").c_str(), F_OK)); }) == EACCES);
  CHECK(CommitAs(2000, m, SampleIdentity("globex", 4), 1000) == ENOENT);
  std::string listing;
  for (const auto& e : std::filesystem::directory_iterator(m.mnt())) listing += e.path().filename().string() + " ";
  CHECK(listing.find("initech") != std::string::npos);
  CHECK(listing.find("globex") == std::string::npos);

  // acme's new quota (50000 retained bytes) refuses a block bigger than it: EDQUOT.
  CHECK(CommitAs(0, m, SampleIdentity("acme", 5), 60000) == EDQUOT);
  CHECK(ReadText(m.mnt() + "/.gpucache/config").find("max_retained_bytes = 50000") != std::string::npos);
}

// Regression (review, 2026-12-06): the configuration's path was resolved once, at start, so a
// reload after its link was moved re-read the old file, and logged a success.
// Regression (review, 2026-12-07): the kept values were logged without their table
// ("max_bytes = 5000000": [cold]'s, or a tenant's?).
TEST_CASE("Reload: a key that needs a restart is logged with its table, and keeps its value") {
  MountedFs m;
  std::string log = Reload(m, "sync_commits = true\n" + TestConfig() + "[ram]\npromote = \"commit\"\n"
                                                                   "[cold]\nmax_bytes = 5000000\n");
  CHECK(log.find("reload: configuration reloaded") != std::string::npos);
  const std::string kept = "reload: needs a restart, kept the running value instead of: ";
  CHECK(log.find(kept + "ram.promote = 'commit'") != std::string::npos);
  CHECK(log.find(kept + "cold.max_bytes = 5000000") != std::string::npos);
  CHECK(log.find(kept + "sync_commits = true") != std::string::npos);
  CHECK(ReadText(m.mnt() + "/.gpucache/config").find("max_bytes = 1073741824") != std::string::npos);
}

TEST_CASE("Reload: a configuration named by a link is re-read through the link") {
  MountedFs m;
  REQUIRE(m.Stop() == 0);
  const std::string v1 = m.scratch() + "/v1.toml", v2 = m.scratch() + "/v2.toml";
  std::filesystem::rename(m.config(), v1);
  std::filesystem::create_symlink(v1, m.config());
  m.Start();
  std::ofstream(v2) << "data_dir = \"" << m.data() << "\"\n" << Reloaded();
  const std::string next = m.config() + ".next";
  std::filesystem::create_symlink(v2, next);
  std::filesystem::rename(next, m.config());  // the link replaced at once, as `ln -sfn` does
  std::string log = Hangup(m);
  CHECK(log.find("reload: configuration reloaded from " + m.config()) != std::string::npos);
  CHECK(CommitAs(3000, m, SampleIdentity("initech"), 1000) == 0);  // the tenant v2 adds
}

TEST_CASE("Reload: a bad file changes nothing, the daemon stays up, and the log says why") {
  MountedFs m;
  SUBCASE("broken TOML") {
    std::string log = Reload(m, Reloaded() + "[tenants.initech\n");
    CHECK(log.find("reload: nothing changed: " + m.config() + ":") != std::string::npos);
  }
  SUBCASE("a key that does not validate") {
    std::string log = Reload(m, Reloaded() + "[tenants.bad]\nuids = [\"root\"]\n");
    CHECK(log.find("reload: nothing changed") != std::string::npos);
    CHECK(log.find("tenants.bad") != std::string::npos);
  }
  // Regression (review, 2026-12-07): a reload ran LoadConfig but not what start-up checks
  // beyond it, so a file --check-config and the next start refuse was applied, and the next
  // restart exited 78 (a unit that does not restart on it stays down).
  SUBCASE("one start-up would refuse: an unusable [cold], a system directory as data_dirs") {
    std::string log = Reload(m, Reloaded() + "[cold]\nenabled = true\nbucket = \"B\"\n"
                                             "keyring_file = \"/nonexistent/keyring\"\n");
    CHECK(log.find("reload: nothing changed") != std::string::npos);
    CHECK(log.find("[cold] s3 endpoint") != std::string::npos);
    CHECK(log.find("(start-up would refuse it too)") != std::string::npos);
    std::ofstream(m.config()) << "data_dirs = [\"" << m.data() << "\", \"/etc\"]\n" << Reloaded();
    log = Hangup(m);
    CHECK(Count(log, "reload: nothing changed") == 2);
    // Regression (review, 2026-12-07): the reload's check had no mountpoint, so a data
    // directory inside the mount was accepted, and the next start refused the file.
    std::ofstream(m.config()) << "data_dirs = [\"" << m.data() << "\", \"" << m.mnt() << "/spare\"]\n"
                              << Reloaded();
    log = Hangup(m);
    CHECK(Count(log, "reload: nothing changed") == 3);
    CHECK(log.find("is inside the mountpoint") != std::string::npos);
  }
  SUBCASE("a missing file") {
    REQUIRE(::unlink(m.config().c_str()) == 0);
    std::string log = Hangup(m);
    CHECK(log.find("reload: nothing changed: " + m.config()) != std::string::npos);
  }
  CHECK(m.Mounted());
  // Still the configuration the daemon started with: globex in, initech out, no acme quota.
  CHECK(CommitAs(2000, m, SampleIdentity("globex", 3), 1000) == 0);
  CHECK(CommitAs(3000, m, SampleIdentity("initech"), 1000) == ENOENT);
  CHECK(CommitAs(1000, m, SampleIdentity("acme", 5), 60000) == 0);
}

// Regression (review, 2026-12-07): until the mount was up, SIGHUP had its default action: a
// reload sent while the daemon read its configuration or opened its store (minutes with
// several data directories) ended it with status 129, nothing in its log and nothing mounted,
// and systemd's Restart=on-failure does not restart a daemon ended by SIGHUP.
TEST_CASE("Reload: a SIGHUP while the daemon starts is a reload once it serves, not its end") {
  auto m = std::make_unique<MountedFs>();
  const std::string config = m->config(), mnt = m->mnt(), log = m->scratch() + "/held.log",
                    pid_file = m->scratch() + "/held.pid";
  REQUIRE(m->Stop() == 0);
  REQUIRE(std::system(("GPUCACHE_TEST_HOLD_START_MS=1000 " GPUCACHEFS_BIN " " + config + " " + mnt +
                       " -f 2>" + log + " & echo $! > " + pid_file).c_str()) == 0);
  const pid_t pid = static_cast<pid_t>(std::stol(ReadText(pid_file)));
  auto wait_for = [&](const std::string& what) {
    for (int i = 0; i < 1000 && ReadText(log).find(what) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ReadText(log).find(what) != std::string::npos;
  };
  REQUIRE(wait_for("test: start held"));
  REQUIRE(::kill(pid, SIGHUP) == 0);
  CHECK(wait_for("mounted at " + mnt));
  CHECK(wait_for("reload: configuration reloaded from " + config));
  CHECK(::kill(pid, 0) == 0);  // still running
  CAPTURE(ReadText(log));
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 500 && ::kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  (void)std::system(("fusermount3 -u -z " + mnt + " 2>/dev/null").c_str());
}

// Regression (review, 2026-12-07): a tenant removed from the configuration kept its blocks'
// fair share for ever (a restart included), so the remaining tenants stayed capped at half of
// the global limit; no admin could see them (status, stats, metrics) or unpin them (EACCES).
TEST_CASE("Reload: a removed tenant's blocks keep no share, and an admin sees and unpins them") {
  MountedFs m(TestConfig("max_retained_bytes = 100000"));
  std::vector<CacheIdentity> theirs, mine;
  for (uint8_t i = 0; i < 5; ++i) {
    CacheIdentity id = SampleIdentity("globex");
    id.chain[0] = Hash(static_cast<uint8_t>(100 + i));
    REQUIRE(CommitAs(2000, m, id, 10000) == 0);
    theirs.push_back(id);
  }
  for (size_t i = 0; i < 2; ++i) {
    REQUIRE(AsUser(2000, 2000, [&] {
              return Control(m, "{\"op\":\"pin\",\"path\":\"" + AddressOf(theirs[i]).RelativePath() + "\"}")
                                 .find("\"ok\":true") != std::string::npos ? 0 : 1;
            }) == 0);
  }
  Reload(m, "[limits]\nmax_retained_bytes = 100000\n[admins]\nuids = [0]\n[tenants.acme]\nuids = [0]\n"
            "[metrics]\nlisten = \"\"\n");
  json status = json::parse(Control(m, R"({"op":"status"})"));
  REQUIRE(status["tenants"].contains("globex"));
  CHECK(status["tenants"]["globex"]["blocks"] == 5);
  CHECK(status["tenants"]["globex"]["removed"] == true);
  CHECK(ReadText(m.mnt() + "/.gpucache/metrics").find("gpucache_blocks{tenant=\"globex\"} 5") != std::string::npos);
  // Unpinning is an admin's way out; pinning a removed tenant's block is not.
  json unpin = json::parse(Control(m, "{\"op\":\"unpin\",\"path\":\"" + AddressOf(theirs[0]).RelativePath() + "\"}"));
  CHECK(unpin["ok"] == true);
  json pin = json::parse(Control(m, "{\"op\":\"pin\",\"path\":\"" + AddressOf(theirs[2]).RelativePath() + "\"}"));
  CHECK(pin["ok"] == false);
  // acme may take every unpinned globex block: 9 of its blocks fit beside the one still pinned.
  for (uint8_t i = 0; i < 10; ++i) {
    CacheIdentity id = SampleIdentity("acme");
    id.chain[0] = Hash(static_cast<uint8_t>(i));
    CAPTURE(int(i));
    REQUIRE(MountClient(m.mnt()).Commit(id, Payload(10000)) == 0);
    mine.push_back(id);
  }
  status = json::parse(Control(m, R"({"op":"status"})"));
  CHECK(status["tenants"]["acme"]["blocks"] == 9);
  CHECK(status["tenants"]["globex"]["blocks"] == 1);
  struct stat st;
  CHECK(::stat((m.data() + "/blocks/" + AddressOf(theirs[1]).RelativePath()).c_str(), &st) == 0);  // pinned
}

}  // namespace
}  // namespace gpucache
