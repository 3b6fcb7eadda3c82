// A full disk for real: the data directory is an 8 MiB tmpfs and the daemon's own limits are
// unlimited (min_free_percent = 0 too: the device itself fills, as when something else on it
// takes the space), so the disk fills before any quota does. What must hold (docs/architecture.md,
// "Errors at the FUSE boundary" and "Limits and eviction"; docs/eviction.md, "A full disk"):
//   - with nothing evictable (every block pinned), a commit that does not fit fails with ENOSPC,
//     commits nothing, leaves no .part and no file in the data directory's tmp/, and every
//     block already committed still reads back identical;
//   - after some blocks are invalidated, commits succeed again;
//   - with evictable blocks, a full disk evicts instead of failing: every commit succeeds.
#include <sys/statvfs.h>

#include <cstdio>
#include <map>

#include "tests/reliability/reliability_helpers.h"
#include "tests/support/tmpfs.h"

namespace gpucache {
namespace {

using namespace test;

struct Kept {
  CacheIdentity id;
  Bytes payload;
};

class FullDisk {
 public:
  FullDisk(const Tmpfs& disk, MountedFs& m) : disk_(disk), m_(m), client_(m.mnt()) {}

  CommitResult Commit(uint64_t n, size_t size) {
    Kept k{RelBlock(n), SeededPayload(n, size)};
    CommitResult r = CommitSteps(m_.mnt(), k.id, k.payload, 256 * 1024);
    if (r.err == 0)
      kept_[n] = std::move(k);
    else
      last_failed_ = k.id;
    return r;
  }

  // A failed commit left nothing behind: no block, no .part, nothing in tmp/, no credits.
  void CheckCleanFailure(const CommitResult& r) {
    std::string step = StepName(r.step);
    CAPTURE(step);
    CHECK(r.err == ENOSPC);
    bool left = StatErrno(client_.PathOf(last_failed_)) != ENOENT ||
                StatErrno(client_.PathOf(last_failed_) + ".part") != ENOENT ||
                LookupResultOf(m_, last_failed_) != "miss" ||
                !FilesUnder(disk_.path() + "/tmp").empty() || Counter(m_, "reservations") != 0 ||
                Counter(m_, "inflight_bytes") != 0;
    CHECK_FALSE(left);  // no block, no .part, no file in tmp/, no credits held
    partial_ += left;
    failure_steps_[StepName(r.step)]++;
  }

  void Pin(uint64_t n, bool pinned) {
    REQUIRE(::setxattr(client_.PathOf(kept_.at(n).id).c_str(), "user.gpucache.pinned",
                       pinned ? "1" : "0", 1, 0) == 0);
  }

  // Every kept block reads back identical, or (if `may_be_evicted`) is a clean miss; the
  // counters and the files on disk agree with what is there.
  size_t CheckKept(bool may_be_evicted) {
    size_t present = 0;
    for (auto it = kept_.begin(); it != kept_.end();) {
      ReadOutcome r = ReadWhole(client_.PathOf(it->second.id));
      CAPTURE(it->first);
      CHECK(WrongBytes(r.got, it->second.payload) == 0);
      if (r.err == ENOENT && may_be_evicted) {
        it = kept_.erase(it);
        continue;
      }
      CHECK(r.err == 0);
      CHECK(r.got.size() == it->second.payload.size());
      ++present;
      ++it;
    }
    CHECK(Counter(m_, "blocks") == present);
    size_t files = 0;
    for (const std::string& f : FilesUnder(disk_.path() + "/blocks")) files += !f.empty();
    CHECK(files == present);
    CHECK(FilesUnder(disk_.path() + "/tmp").empty());
    return present;
  }

  std::map<uint64_t, Kept>& kept() { return kept_; }
  const std::map<std::string, int>& failure_steps() const { return failure_steps_; }
  int partial() const { return partial_; }
  MountClient& client() { return client_; }

 private:
  const Tmpfs& disk_;
  MountedFs& m_;
  MountClient client_;
  std::map<uint64_t, Kept> kept_;
  CacheIdentity last_failed_;
  std::map<std::string, int> failure_steps_;
  int partial_ = 0;  // failed commits that left something behind
};

TEST_CASE(
    "Reliability full disk: ENOSPC through the mount commits nothing and eviction makes room") {
  uint64_t seed = TestSeed();
  INFO("GPUCACHE_SEED=" << seed);
  Rng rng(seed);
  TempDir holder;
  Tmpfs disk(holder.path() + "/disk", "8m");
  REQUIRE_MESSAGE(disk.mounted(), "cannot mount a tmpfs (needs root)");
  // The daemon's limits are far above the disk: the disk fills first.
  MountedFs m("data_dirs = [\"" + disk.path() + "\"]\n" +
              TestConfig("max_retained_bytes = 1073741824\nmin_free_percent = 0"));
  FullDisk fd(disk, m);
  uint64_t n = 1;

  // 1. Pinned blocks (nothing evictable) until a commit does not fit.
  CommitResult r;
  while ((r = fd.Commit(n, rng.Range(200 * 1024, 700 * 1024))).err == 0) fd.Pin(n++, true);
  n++;
  size_t filled = fd.kept().size();
  REQUIRE(filled >= 8);
  fd.CheckCleanFailure(r);
  // To the brim: a payload of every free page leaves none for the header, so it fails at the
  // commit itself; one page less fits exactly; then not even one byte fits.
  uint64_t free_bytes = disk.FreeBytes();
  if (free_bytes >= 2 * 4096) {
    r = fd.Commit(n++, free_bytes);
    fd.CheckCleanFailure(r);
    r = fd.Commit(n, free_bytes - 4096);
    CHECK(r.err == 0);
    CHECK(disk.FreeBytes() == 0);
    if (r.err == 0) fd.Pin(n, true);
    n++;
  }
  r = fd.Commit(n++, 1);
  fd.CheckCleanFailure(r);
  fd.CheckKept(false);

  // 2. Invalidate two blocks: a commit fits again.
  for (int i = 0; i < 2; ++i) {
    auto victim = fd.kept().begin();
    REQUIRE(::unlink(fd.client().PathOf(victim->second.id).c_str()) == 0);
    fd.kept().erase(victim);
  }
  r = fd.Commit(n, 300 * 1024);
  CHECK(r.err == 0);
  if (r.err == 0) fd.Pin(n, true);
  n++;
  fd.CheckKept(false);

  // 3. Unpinned: the full disk evicts instead of failing, even when a payload takes every free
  // page (the header then needs room that only eviction can give).
  for (auto& [k, v] : fd.kept()) fd.Pin(k, false);
  uint64_t evictions_before = Counter(m, "evictions");
  int commits = 0, failed = 0;
  for (int i = 0; i < 30; ++i) {
    size_t size = i % 10 == 9 ? std::max<uint64_t>(disk.FreeBytes(), 4096)
                              : rng.Range(100 * 1024, 900 * 1024);
    r = fd.Commit(n++, size);
    CAPTURE(i);
    CAPTURE(size);
    std::string step = StepName(r.step);
    CAPTURE(step);
    CHECK(r.err == 0);
    commits += r.err == 0;
    failed += r.err != 0;
  }
  uint64_t evicted = Counter(m, "evictions") - evictions_before;
  size_t present = fd.CheckKept(true);
  std::string steps;
  for (auto& [s, c] : fd.failure_steps()) steps += " " + s + "=" + std::to_string(c);
  std::printf(
      "full disk: filled=%zu blocks (8 MiB tmpfs) enospc_failures:%s left_behind=%d "
      "then unpinned commits=%d failed=%d evicted=%llu present=%zu\n",
      filled, steps.c_str(), fd.partial(), commits, failed,
      static_cast<unsigned long long>(evicted), present);
  CHECK(evicted > 0);
  CHECK(failed == 0);
}

// Issue 13, defect 2: on a 16 MiB device holding another tenant's 10 MiB, a 20 MiB commit
// evicted every evictable block of every tenant and then failed with ENOSPC anyway.
struct TwoTenants {
  TempDir holder;
  Tmpfs disk{holder.path() + "/disk", "16m"};
  std::unique_ptr<MountedFs> m;
  std::vector<Kept> globex;  // tenant B's blocks, 1 MiB each

  TwoTenants() {
    REQUIRE_MESSAGE(disk.mounted(), "cannot mount a tmpfs (needs root)");
    m = std::make_unique<MountedFs>("data_dirs = [\"" + disk.path() + "\"]\n" +
                                    TestConfig("min_free_percent = 0"));
    MountClient client(m->mnt());
    for (uint64_t n = 1; n <= 10; ++n) {
      Kept k{RelBlock(n, "globex"), SeededPayload(n, 1 << 20)};
      REQUIRE(AsUser(2000, 2000, [&] { return client.Commit(k.id, k.payload); }) == 0);
      globex.push_back(std::move(k));
    }
  }
  // How many of B's blocks still read back identical (none may read back different).
  size_t GlobexPresent() {
    MountClient client(m->mnt());
    size_t present = 0;
    for (const Kept& k : globex) {
      ReadOutcome r = ReadWhole(client.PathOf(k.id));  // root: an admin reads every tenant
      CHECK(WrongBytes(r.got, k.payload) == 0);
      present += r.err == 0 && r.got == k.payload;
    }
    return present;
  }
};

TEST_CASE("Reliability full disk: a block that cannot fit is refused before anything is evicted") {
  TwoTenants t;
  MountClient client(t.m->mnt());
  uint64_t evictions = Counter(*t.m, "evictions", "globex");
  // Declared (the clients fallocate blocks of 1 MiB and more first): decided up front.
  CHECK(client.Commit(RelBlock(100), SeededPayload(100, 20 << 20)) == ENOSPC);
  CHECK(Counter(*t.m, "evictions", "globex") == evictions);
  CHECK(t.GlobexPresent() == 10);
  CHECK(FilesUnder(t.disk.path() + "/tmp").empty());
  // Plain writes, size unknown until the end: what is evicted for them never takes tenant B
  // below its fair share (half of what the device holds and has free, for two tenants).
  CommitResult r = CommitSteps(t.m->mnt(), RelBlock(101), SeededPayload(101, 20 << 20));
  CHECK(r.err == ENOSPC);
  size_t present = t.GlobexPresent();
  std::printf("full disk, 20 MiB into 16 MiB: declared evicted 0, undeclared left globex %zu of 10\n",
              present);
  CHECK(present >= 7);
  CHECK(FilesUnder(t.disk.path() + "/tmp").empty());
}

TEST_CASE("Reliability full disk: one tenant's fills never take another below its fair share") {
  TwoTenants t;
  MountClient client(t.m->mnt());
  // Tenant A fills the device with 1 MiB blocks, twice what it has free: every commit must
  // succeed (B's excess goes first, then A's own oldest), and B keeps its fair share.
  int failed = 0;
  for (uint64_t n = 200; n < 212; ++n) {
    int err = n % 2 ? client.Commit(RelBlock(n), SeededPayload(n, 1 << 20))
                    : CommitSteps(t.m->mnt(), RelBlock(n), SeededPayload(n, 1 << 20)).err;
    CAPTURE(n);
    CHECK(err == 0);
    failed += err != 0;
  }
  size_t present = t.GlobexPresent();
  std::printf("full disk, 12 MiB of tenant A after 10 MiB of B on 16 MiB: B keeps %zu of 10, "
              "A failed %d\n", present, failed);
  CHECK(present >= 7);
  CHECK(Counter(*t.m, "blocks", "acme") > 0);
}

}  // namespace
}  // namespace gpucache
