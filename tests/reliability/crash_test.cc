// Crash consistency through a real mount.
//
// Failpoints (store/failpoint.h) make the daemon die at each step of the commit path: after the
// temporary file is created, after the identity is recorded, after or in the middle of the Nth
// write, after the payload is truncated and hashed, in the middle of the header, before and
// after the rename into blocks/, and after the index update (before the writer hears back).
// SIGKILL at random moments under a concurrent writer covers everything in between.
//
// The writer keeps a record: blocks whose commit was acknowledged, and the one in flight when
// the daemon died. After each restart:
//   - every acknowledged block is a hit, byte-identical to what was committed;
//   - the block in flight is a miss, or a hit that is byte-identical (a crash after the rename:
//     published but not acknowledged); for failpoints the test knows which of the two it must be;
//   - no .part survives (listing, stat) and the data directory's tmp/ is empty;
//   - nothing else appears in the namespace.
// Every payload names its block (SeededPayload), so a byte from another fill shows.
//
// These are process crashes: the kernel keeps what the daemon wrote. Power loss (unsynced pages
// lost) is not simulated; docs/reliability.md says what sync_commits adds there.
#include <signal.h>

#include <cstdio>
#include <map>
#include <optional>

#include "tests/reliability/reliability_helpers.h"

namespace gpucache {
namespace {

using namespace test;

constexpr size_t kWriteChunk = 256 * 1024;  // the writer's write() size: several writes per block

struct Fill {
  uint64_t n = 0;
  size_t size = 0;
  Bytes Payload() const { return SeededPayload(n * 7919 + size, size); }
};

// What a writer knows: what was acknowledged, and what was in flight when the daemon died.
struct Record {
  std::map<uint64_t, Fill> acked;
  std::optional<Fill> in_flight;
  enum class Expect { kEither, kAbsent, kPresent } expect = Expect::kEither;
};

struct Figures {
  size_t points = 0, mid_write = 0, in_flight = 0, published_unacked = 0, violations = 0;
  size_t verified_blocks = 0;
};

// Checks the restarted daemon against the record, then folds the crash into it: a published
// block in flight becomes acknowledged, a lost one is forgotten. Trims the record to `keep`
// blocks (unlinking the others) so that each round reads a bounded amount.
void VerifyAfterRestart(MountedFs& m, Record& rec, Figures& f, Rng& rng, size_t keep) {
  MountClient client(m.mnt());
  auto violation = [&](bool ok, const std::string& what) {
    if (!ok) {
      f.violations++;
      FAIL_CHECK(what);
    }
  };
  for (const auto& [n, fill] : rec.acked) {
    ReadOutcome r = ReadWhole(client.PathOf(RelBlock(n)));
    violation(r.err == 0 && r.got == fill.Payload(), "acknowledged block " + std::to_string(n) +
                                                         " lost or changed (errno " +
                                                         std::to_string(r.err) + ")");
    f.verified_blocks++;
  }
  size_t expected_entries = rec.acked.size();
  if (rec.in_flight) {
    const Fill& fill = *rec.in_flight;
    std::string path = client.PathOf(RelBlock(fill.n));
    ReadOutcome r = ReadWhole(path);
    bool present = r.err == 0;
    violation(r.err == 0 || r.err == ENOENT, "block in flight: errno " + std::to_string(r.err));
    violation(WrongBytes(r.got, fill.Payload()) == 0 && (!present || r.got.size() == fill.size),
              "block in flight " + std::to_string(fill.n) + " is a hit with other bytes");
    if (rec.expect == Record::Expect::kPresent)
      violation(present, "published block in flight was lost");
    if (rec.expect == Record::Expect::kAbsent)
      violation(!present, "unpublished block in flight is a hit");
    violation(StatErrno(path + ".part") == ENOENT, ".part of the block in flight survived");
    if (!present)
      violation(LookupResultOf(m, RelBlock(fill.n)) == "miss", "lost block is not a clean miss");
    if (present) {
      f.published_unacked++;
      rec.acked[fill.n] = fill;
      expected_entries++;
    }
    rec.in_flight.reset();
  }
  std::string ns = NsDir(m, RelBlock(0));
  std::vector<std::string> entries = ListMounted(ns);
  size_t parts = 0;
  for (const std::string& e : entries) parts += e.ends_with(".part");
  violation(parts == 0, "a .part survived the restart");
  violation(entries.size() == expected_entries,
            "namespace holds " + std::to_string(entries.size()) + " entries, expected " +
                std::to_string(expected_entries));
  violation(FilesUnder(m.data() + "/tmp").empty(), "tmp/ is not empty after the restart");
  // Keep the record (and the reads per round) small.
  while (rec.acked.size() > keep) {
    auto it = std::next(rec.acked.begin(), static_cast<long>(rng.Below(rec.acked.size())));
    violation(::unlink(client.PathOf(RelBlock(it->first)).c_str()) == 0,
              "unlink of a verified block");
    rec.acked.erase(it);
  }
}

struct Point {
  const char* name;
  bool published;  // the block in flight is on disk under its name when the daemon dies
  bool per_write;  // passed once per write request (else once per commit)
};

constexpr Point kPoints[] = {
    {"reserve.after_create", false, false}, {"identity.after_set", false, false},
    {"write.after", false, true},           {"write.torn", false, true},
    {"seal.after_truncate", false, false},  {"seal.after_checksums", false, false},
    {"seal.torn_header", false, false},     {"seal.after_header", false, false},
    {"seal.before_rename", false, false},   {"seal.after_rename", true, false},
    {"commit.after_index", true, false},
};

size_t CountOf(const std::string& hay, const std::string& needle) {
  size_t c = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++c;
  return c;
}

TEST_CASE("Reliability crash: a failpoint at every step of the commit path then a restart") {
  uint64_t seed = TestSeed();
  INFO("GPUCACHE_SEED=" << seed);
  Rng rng(seed);
  struct Scenario {
    Point point;
    uint64_t fire_at;
    size_t size;
  };
  std::vector<Scenario> scenarios;
  const size_t sizes[] = {1, 70000, (1 << 20) + 17, (5 << 19) + 3};  // 1, 1, 5, 10 writes
  for (const Point& p : kPoints) {
    if (p.per_write) {
      for (size_t size : {sizes[1], sizes[2], sizes[3]}) {
        for (uint64_t at : {1, 2, 3, 5, 8, 13}) scenarios.push_back({p, at, size});
      }
    } else {
      for (size_t size : {sizes[0], sizes[1], sizes[2]}) {
        for (uint64_t at : {1, 2, 3}) scenarios.push_back({p, at, size});
      }
    }
  }
  MountedFs m;
  m.Kill();  // every run below starts with its own failpoint
  Record rec;
  Figures f;
  uint64_t next = 1;
  auto t0 = Clock::now();
  for (const Scenario& s : scenarios) {
    std::string spec = std::string(s.point.name) + "@" + std::to_string(s.fire_at);
    CAPTURE(spec);
    CAPTURE(s.size);
    ::setenv("GPUCACHE_FAILPOINTS", spec.c_str(), 1);
    m.Start();
    ::unsetenv("GPUCACHE_FAILPOINTS");
    VerifyAfterRestart(m, rec, f, rng, 16);  // reads only: no failpoint on the way
    size_t fired_before = CountOf(m.Log(), "failpoint " + std::string(s.point.name) + " fired");
    // Commit until the daemon dies; the failpoint decides which commit and where.
    CommitResult r;
    for (int i = 0; i < 20 && r.err == 0; ++i) {
      Fill fill{next++, s.size};
      r = CommitSteps(m.mnt(), RelBlock(fill.n), fill.Payload(), kWriteChunk, nullptr,
                      /*cleanup=*/false);
      if (r.err == 0)
        rec.acked[fill.n] = fill;
      else
        rec.in_flight = fill;
    }
    REQUIRE_MESSAGE(r.err != 0, "the failpoint never fired");
    m.Kill();  // reaps the dead daemon and detaches its mount
    CHECK(CountOf(m.Log(), "failpoint " + std::string(s.point.name) + " fired") ==
          fired_before + 1);
    rec.expect = s.point.published ? Record::Expect::kPresent : Record::Expect::kAbsent;
    f.points++;
    if (r.step != Step::kOpen) f.in_flight++;
    if (r.step == Step::kWrite) f.mid_write++;
  }
  m.Start();
  VerifyAfterRestart(m, rec, f, rng, 16);
  std::printf(
      "crash: failpoint points=%zu (%zu failpoints) mid_write=%zu in_flight=%zu "
      "published_unacked=%zu verified_reads=%zu violations=%zu in %.1fs (%.0f ms per point)\n",
      f.points, std::size(kPoints), f.mid_write, f.in_flight, f.published_unacked,
      f.verified_blocks, f.violations, SecondsSince(t0), 1000 * SecondsSince(t0) / f.points);
  CHECK(f.violations == 0);
}

TEST_CASE("Reliability crash: SIGKILL at random moments under a concurrent writer") {
  uint64_t seed = TestSeed();
  INFO("GPUCACHE_SEED=" << seed);
  std::printf("crash: SIGKILL seed=%llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  constexpr int kRounds = 130;
  MountedFs m;
  Record rec;
  Figures f;
  std::atomic<uint64_t> next{1};
  std::map<std::string, int> kill_steps;
  double t_sleep = 0, t_kill = 0, t_start = 0, t_verify = 0;
  size_t uniform_kills = 0, uniform_mid_write = 0;
  auto t0 = Clock::now();
  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    std::atomic<bool> killed{false};
    std::atomic<int> at{0};
    CommitResult last;
    std::optional<Fill> failed_fill;
    bool failed_before_kill = false;
    std::vector<Fill> acked_now;
    uint64_t writer_seed = rng.Next();
    std::thread writer([&] {
      Rng wr(writer_seed);
      for (;;) {
        Fill fill{next++, static_cast<size_t>(wr.Range(16 * 1024, 2 << 20))};
        // 64 KiB writes, as an engine streaming layer by layer would: most of a commit's time is
        // then its writes, where a crash matters most.
        last = CommitSteps(m.mnt(), RelBlock(fill.n), fill.Payload(), 64 * 1024, &at,
                           /*cleanup=*/false);
        if (last.err != 0) {
          failed_before_kill = !killed.load();
          failed_fill = fill;
          return;
        }
        acked_now.push_back(fill);
      }
    });
    // Odd rounds: a uniformly random moment in the first 60 ms of writing (a commit takes a few
    // ms). Even rounds: a random moment soon after the writer next enters its write() calls, so
    // that torn payloads are covered whatever the machine's speed.
    auto tk = Clock::now();
    if (round % 2 == 1) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng.Range(500, 60000)));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(rng.Range(0, 5000)));
      while (at.load() != static_cast<int>(Step::kWrite) && SecondsSince(tk) < 1)
        std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::microseconds(rng.Range(0, 300)));
    }
    killed = true;
    t_sleep += SecondsSince(tk);
    tk = Clock::now();
    m.Kill();
    writer.join();
    t_kill += SecondsSince(tk);
    for (const Fill& fill : acked_now) rec.acked[fill.n] = fill;
    if (failed_before_kill) {
      f.violations++;
      FAIL_CHECK("a commit failed before the kill: errno " << last.err << " at "
                                                           << StepName(last.step));
    }
    rec.in_flight = failed_fill;
    rec.expect = Record::Expect::kEither;
    f.points++;
    kill_steps[StepName(last.step)]++;
    if (last.step != Step::kOpen) f.in_flight++;
    if (last.step == Step::kWrite) f.mid_write++;
    if (round % 2 == 1) {
      uniform_kills++;
      uniform_mid_write += last.step == Step::kWrite;
    }
    tk = Clock::now();
    m.Start();
    t_start += SecondsSince(tk);
    tk = Clock::now();
    VerifyAfterRestart(m, rec, f, rng, 8);
    t_verify += SecondsSince(tk);
    // The engine recomputes what was lost: a dropped fill can be committed again at once.
    if (failed_fill && StatErrno(MountClient(m.mnt()).PathOf(RelBlock(failed_fill->n))) == ENOENT) {
      CommitResult again = CommitSteps(m.mnt(), RelBlock(failed_fill->n), failed_fill->Payload());
      if (again.err != 0) {
        f.violations++;
        FAIL_CHECK("a lost fill cannot be committed again: errno " << again.err);
      } else {
        rec.acked[failed_fill->n] = *failed_fill;
      }
    }
  }
  std::string steps;
  for (auto& [s, c] : kill_steps) steps += " " + s + "=" + std::to_string(c);
  std::printf(
      "crash: SIGKILL points=%zu mid_write=%zu (uniformly timed: %zu of %zu) in_flight=%zu "
      "published_unacked=%zu violations=%zu killed_at:%s in %.1fs (%.0f ms per point)\n",
      f.points, f.mid_write, uniform_mid_write, uniform_kills, f.in_flight, f.published_unacked,
      f.violations, steps.c_str(), SecondsSince(t0), 1000 * SecondsSince(t0) / f.points);
  std::printf(
      "crash: SIGKILL time: writing before the kill %.1fs, kill+unmount %.1fs, restart %.1fs, "
      "verify %.1fs\n",
      t_sleep, t_kill, t_start, t_verify);
  CHECK(f.violations == 0);
  // A kill test that mostly hits the writer between commits tests little.
  CHECK_MESSAGE(f.mid_write * 10 >= f.points * 3,
                "only " << f.mid_write << " of " << f.points << " kills landed mid-write");
}

}  // namespace
}  // namespace gpucache
