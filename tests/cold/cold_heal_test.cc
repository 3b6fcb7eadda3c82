// Through a real gpucachefs mount and the real gateway: write-back heals after an outage
// without an operator, a refill stalled on S3 does not hold up other control requests, and
// the accounting identity holds across a restart.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "cold/manifest.h"
#include "cold/s3_client.h"
#include "cold/sink.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/rgw_support.h"
#include "tests/mount/mount_helpers.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

namespace {

json Ctl(const test::MountedFs& m, const json& req) {
  return json::parse(test::Control(m, req.dump()), nullptr, false);
}

struct HealMount {
  test::TempDir creds_dir;
  std::string prefix;
  std::unique_ptr<test::MountedFs> fs;
  HealMount(const std::string& endpoint, const char* name, const std::string& extra)
      : prefix(UniquePrefix(name)) {
    std::string creds = creds_dir.path() + "/s3.credentials";
    WriteCredentials(creds);
    fs = std::make_unique<test::MountedFs>(test::TestConfig() + ColdSection(endpoint, creds, prefix, extra));
  }
  json Report() { return Ctl(*fs, {{"op", "cold.report"}})["cold"]; }
};

// How many times `needle` occurs in `text`.
size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) n++;
  return n;
}

bool Balanced(const json& r) {
  return r["submitted"].get<uint64_t>() == r["uploaded"].get<uint64_t>() + r["pending"].get<uint64_t>() +
                                               r["in_flight"].get<uint64_t>() + r["failed"].get<uint64_t>() +
                                               r["dropped"].get<uint64_t>();
}

// An object store that is down (the proxy fails every request) until End().
struct Outage {
  explicit Outage(const std::string& endpoint) : proxy(endpoint, 0.0, "", 2, 1, Down(dir)) {}
  void End() { std::remove((dir.path() + "/outage").c_str()); }
  static std::string Down(const test::TempDir& d) {
    std::string file = d.path() + "/outage";
    std::ofstream(file) << "down\n";
    return file;
  }
  test::TempDir dir;
  LoggedProxy proxy;
};

// The sink's report once `n` jobs have entered the failed queue (or after 30 s).
json AwaitFailedEntries(HealMount& m, uint64_t n) {
  json r;
  for (int i = 0; i < 600; i++) {
    r = m.Report();
    if (r["failed_entries_total"].get<uint64_t>() >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return r;
}

}  // namespace

TEST_CASE("Cold: after-commit write-back heals once an outage ends, without an operator") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  Outage outage(env["GPUCACHE_S3_ENDPOINT"]);
  REQUIRE(outage.proxy.ready());
  HealMount m(outage.proxy.endpoint(), "heal",
              "write_back = \"after-commit\"\nflush_interval = 0.1\nredrive_interval = 0.3\n");
  for (int i = 0; i < 6; i++) {
    REQUIRE(MountClient(m.fs->mnt()).Commit(NthIdentity(i), PayloadOf(i, 4096)) == 0);
  }
  json r = AwaitFailedEntries(m, 1);  // the outage has failed at least one job
  REQUIRE(r["failed_entries_total"].get<uint64_t>() > 0);
  CHECK(r["uploaded"] == 0);
  CHECK(Balanced(r));

  outage.End();
  for (int i = 0; i < 1200; i++) {
    r = m.Report();
    if (r["uploaded"] == r["submitted"] && r["pending"] == 0 && r["failed"] == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CAPTURE(r.dump());
  CHECK(r["uploaded"] == r["submitted"]);
  CHECK(r["failed"] == 0);
  CHECK(r["redriven"].get<uint64_t>() > 0);
  CHECK(r["retried"] == 0);
  CHECK(Balanced(r));
  // Every committed block is now cold: a pack finds nothing left to do and exits 0.
  int rc = -1;
  Run(std::string(GPUCACHECTL_BIN) + " cold pack " + m.fs->mnt() + " --json", &rc);
  CHECK(rc == 0);
}

// Regression: the background thread dropped what each drain round did, so an object store
// that started failing uploads wrote nothing to the daemon's log; only the metrics moved. Now
// an outage is a warning of each kind (jobs failed for good, attempts requeued), however many
// attempts it fails within a minute, and its end is a line too.
TEST_CASE("Cold: an upload outage is logged once, not once per attempt, and so is its end") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  Outage outage(env["GPUCACHE_S3_ENDPOINT"]);
  REQUIRE(outage.proxy.ready());
  HealMount m(outage.proxy.endpoint(), "outagelog",
              "write_back = \"after-commit\"\nflush_interval = 0.1\nredrive_interval = 0.2\n"
              "max_attempts = 2\nretry_base_delay = 0.05\nretry_max_delay = 0.1\n");
  for (int i = 0; i < 4; i++) {
    REQUIRE(MountClient(m.fs->mnt()).Commit(NthIdentity(i), PayloadOf(i, 4096)) == 0);
  }
  json r = AwaitFailedEntries(m, 3);  // jobs failed, were re-driven and failed again
  REQUIRE(r["failed_entries_total"].get<uint64_t>() >= 3);
  const std::string failed_line = "upload job(s) moved to the failed queue";
  const std::string requeued_line = "failed with a temporary error";
  std::string log = m.fs->Log();
  CAPTURE(log);
  CHECK(Occurrences(log, failed_line) == 1);
  CHECK(Occurrences(log, requeued_line) == 1);
  CHECK(log.find("first error: job ") != std::string::npos);

  outage.End();
  const std::string recovered_line = "cold tier: uploads succeed again";
  for (int i = 0; i < 600 && Occurrences(m.fs->Log(), recovered_line) == 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  log = m.fs->Log();
  CHECK(Occurrences(log, recovered_line) == 1);
  CHECK(log.find(recovered_line) > log.rfind(failed_line));
  CHECK(Occurrences(log, failed_line) == 1);  // still within the minute: no second warning
}

TEST_CASE("Cold: refills stalled on S3 do not hold up other control requests") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  // Every request through this proxy stalls 4 s, then its connection closes.
  LoggedProxy proxy(env["GPUCACHE_S3_ENDPOINT"], 1.0, "stall", /*stall_seconds=*/4);
  REQUIRE(proxy.ready());
  HealMount m(proxy.endpoint(), "stall", "");
  REQUIRE(MountClient(m.fs->mnt()).Commit(NthIdentity(50), PayloadOf(50, 4096)) == 0);

  std::vector<uint64_t> ops;
  for (int i = 0; i < 4; i++) {
    json q = Ctl(*m.fs, {{"op", "cold.refill"}, {"async", true},
                         {"identity", HexEncode(EncodePhysicalKey(NthIdentity(i)))}});
    REQUIRE(q["ok"] == true);
    ops.push_back(q["op_id"]);
  }
  // A lookup answers while the refills wait on S3 (they used to run inside the control
  // file's write(), which the kernel serializes, so a lookup queued behind them).
  json lookup = Ctl(*m.fs, {{"op", "lookup"}, {"identity", HexEncode(EncodePhysicalKey(NthIdentity(50)))}});
  CHECK(lookup["ok"] == true);
  CHECK(lookup["result"] == "hit");
  size_t unfinished = 0;
  for (uint64_t id : ops) {
    json p = Ctl(*m.fs, {{"op", "cold.op"}, {"op_id", id}});
    unfinished += p["state"] != "done";
  }
  CHECK(unfinished > 0);  // so the lookup really did not wait for them
  // They end as Missing (unavailable) when the stall ends.
  for (uint64_t id : ops) {
    json p;
    for (int i = 0; i < 600; i++) {
      p = Ctl(*m.fs, {{"op", "cold.op"}, {"op_id", id}});
      if (p.value("state", "") == "done" || p.value("errno", "") == "ENOENT") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (p.value("state", "") == "done") {
      CHECK(p["result"] == "missing");
      CHECK(p["reason"] == "unavailable");
    }
  }
}

TEST_CASE("Cold: a member's synchronous refills stalled on S3 hold up no other tenant, and take at most two threads") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  LoggedProxy proxy(env["GPUCACHE_S3_ENDPOINT"], 1.0, "stall", /*stall_seconds=*/6);
  REQUIRE(proxy.ready());
  HealMount m(proxy.endpoint(), "syncstall", "");
  CacheIdentity globex = NthIdentity(7, "globex");
  REQUIRE(test::AsUser(2000, 2000, [&] { return MountClient(m.fs->mnt()).Commit(globex, PayloadOf(7, 4096)); }) == 0);
  auto refill = [&](int i) {
    return json{{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(NthIdentity(i)))}}.dump();
  };
  // Two synchronous refills by acme's member uid 1000 (no "async"): they wait on S3 for 6 s.
  std::atomic<int> finished{0};
  std::vector<std::thread> members;
  for (int i = 0; i < 2; i++) {
    members.emplace_back([&, i] {
      test::AsUser(1000, 1000, [&] { return test::Control(*m.fs, refill(i)).empty() ? 1 : 0; });
      finished++;
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // Another tenant's lookup and the admin's status answer while both still wait (before, the
  // first refill ran inside write(), which the kernel serializes, and held them 6 s).
  int lookup = test::AsUser(2000, 2000, [&] {
    json r = Ctl(*m.fs, {{"op", "lookup"}, {"identity", HexEncode(EncodePhysicalKey(globex))}});
    return r.value("result", "") == "hit" ? 0 : 1;
  });
  CHECK(lookup == 0);
  CHECK(Ctl(*m.fs, {{"op", "status"}})["ok"] == true);
  // A third from the same uid is refused at once instead of taking a third FUSE thread.
  int third = test::AsUser(1000, 1000, [&] {
    return test::Control(*m.fs, refill(2)).find("EAGAIN") != std::string::npos ? 0 : 1;
  });
  CHECK(third == 0);
  CHECK(finished == 0);  // so none of the above waited for them
  for (std::thread& t : members) t.join();
}

// Regression (review, 2026-12-06): the reads of one control file that wanted its reply waited
// for the handle's lock while the first ran the request, each holding a FUSE thread before any
// per-uid slot was counted: one member with one descriptor and 12 threads reading it, behind a
// refill stalled on S3, took all 10 threads, and every tenant's stat waited for the stall.
// Now a read that finds the request running elsewhere answers EAGAIN at once.
TEST_CASE("Cold: readers of one control file behind a stalled refill hold no FUSE thread") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  LoggedProxy proxy(env["GPUCACHE_S3_ENDPOINT"], 1.0, "stall", /*stall_seconds=*/6);
  REQUIRE(proxy.ready());
  HealMount m(proxy.endpoint(), "onefd", "");
  const std::string ctl = m.fs->mnt() + "/.gpucache/ctl";
  const std::string request =
      json{{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(NthIdentity(0)))}}.dump();
  constexpr int kReaders = 12;  // more than the daemon's FUSE threads
  // Markers the member's process leaves (it runs as another uid, in a child): all the readers
  // that were refused have returned (the refill is running: a refusal means so), and the
  // refill's own read has returned.
  test::TempDir markers;
  ::chmod(markers.path().c_str(), 0777);  // the member's process writes them as uid 1000
  const std::string refused_all = markers.path() + "/refused", refill_done = markers.path() + "/done";
  auto exists = [](const std::string& p) { return ::access(p.c_str(), F_OK) == 0; };
  std::thread member([&] {
    // Exit code: the number of reads that answered EAGAIN at once (the others got the reply).
    int eagain = test::AsUser(1000, 1000, [&] {
      int fd = ::open(ctl.c_str(), O_RDWR);
      if (fd < 0 || ::write(fd, request.data(), request.size()) != ssize_t(request.size())) return 255;
      std::atomic<int> refused{0};
      std::vector<std::thread> readers;
      for (int i = 0; i < kReaders; i++) {
        readers.emplace_back([&] {
          char buf[4096];
          if (::pread(fd, buf, sizeof buf, 0) < 0 && errno == EAGAIN) {
            if (++refused == kReaders - 1) std::ofstream(refused_all) << "\n";
          } else {
            std::ofstream(refill_done) << "\n";
          }
        });
      }
      for (std::thread& t : readers) t.join();
      ::close(fd);
      return refused.load();
    });
    CHECK(eagain == kReaders - 1);  // one ran the refill; the others were told to come back
  });
  // Once every refused reader is back (no sleep: before, they waited on a daemon thread each and
  // came back only when the refill ended, so this wait ends after the refill then)...
  for (int i = 0; i < 12000 && !exists(refused_all) && !exists(refill_done); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // (a member that failed: 60 s)
  }
  CHECK(exists(refused_all));
  // ...another tenant is served while the refill still waits on S3 (a control request: OPEN,
  // WRITE and READ, each needing a FUSE thread).
  int status = test::AsUser(2000, 2000, [&] { return Ctl(*m.fs, {{"op", "status"}})["ok"] == true ? 0 : 1; });
  CHECK(status == 0);
  CHECK_FALSE(exists(refill_done));  // answered before the stalled refill ended
  member.join();
}

TEST_CASE("Cold: across a restart the identity holds, and a backfill packs what the old daemon left") {
  auto env = RgwEnv();
  REQUIRE_MESSAGE(!env.empty(), "GPUCACHE_S3_ENV_FILE: run through ctest (fixture cold_rgw)");
  // Every upload is reset (listings pass, so the pack knows what is cold).
  LoggedProxy proxy(env["GPUCACHE_S3_ENDPOINT"], 1.0, "reset", 2, 1, "", "PUT");
  REQUIRE(proxy.ready());
  // One attempt per job, no re-drive, and a background drain only every minute: what the
  // proxy fails stays failed, and what an operator retries stays pending.
  HealMount m(proxy.endpoint(), "restart",
              "max_attempts = 1\nflush_interval = 60\npack_target_bytes = 8192\n");
  const int blocks = 8;  // two per pack: four jobs
  for (int i = 0; i < blocks; i++) {
    REQUIRE(MountClient(m.fs->mnt()).Commit(NthIdentity(i), PayloadOf(i, 4096)) == 0);
  }
  int rc = -1;
  Run(std::string(GPUCACHECTL_BIN) + " cold pack " + m.fs->mnt() + " --json", &rc);
  CHECK(rc == 3);  // incomplete: every upload failed
  json failed = Ctl(*m.fs, {{"op", "cold.failed"}})["failed"];
  REQUIRE(failed.size() == 4);
  for (int i : {0, 1}) REQUIRE(Ctl(*m.fs, {{"op", "cold.retry"}, {"job", failed[i]["job"]}})["ok"] == true);
  json before = m.Report();
  CAPTURE(before.dump());
  CHECK(before["submitted"] == 4);
  CHECK(before["pending"] == 2);
  CHECK(before["failed"] == 2);
  CHECK(before["uploaded"] == 0);
  CHECK(Balanced(before));

  // The jobs die with the daemon; the new one, started straight on the gateway, starts its
  // own count, balanced from the start.
  REQUIRE(m.fs->Stop() == 0);
  {
    std::ifstream in(m.fs->config());
    std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t at = config.find(proxy.endpoint());
    REQUIRE(at != std::string::npos);
    config.replace(at, proxy.endpoint().size(), env["GPUCACHE_S3_ENDPOINT"]);
    std::ofstream(m.fs->config()) << config;
  }
  m.fs->Start();
  json after = m.Report();
  CAPTURE(after.dump());
  CHECK(after["submitted"] == 0);
  CHECK(after["pending"] == 0);
  CHECK(after["failed"] == 0);
  CHECK(Balanced(after));

  // Their blocks have no locator, so the next backfill packs every one of them.
  std::string out = Run(std::string(GPUCACHECTL_BIN) + " cold pack " + m.fs->mnt() + " --json", &rc);
  CHECK(rc == 0);
  json packed = json::parse(out, nullptr, false);
  CAPTURE(out);
  CHECK(packed["blocks"] == blocks);
  CHECK(packed["skipped_cold"] == 0);
  json end = m.Report();
  CHECK(end["submitted"] == 4);
  CHECK(end["uploaded"] == 4);
  CHECK(Balanced(end));
}

}  // namespace gpucache::cold
