// The store's commit path under I/O faults and power loss, in-process through FaultEnv
// (tests/support/fault_env.h) over real files.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <random>
#include <vector>
#include <algorithm>

#include "store/file_store.h"
#include "tests/support/fault_env.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::FaultEnv;
constexpr Owner kOwner{1000, 1000};

CacheIdentity Key(int k) {
  CacheIdentity id = test::SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(k % 250), 16 + k / 250);
  return id;
}

std::unique_ptr<IndexedStore> Open(const std::string& dir, Env* env, bool sync = false) {
  StoreOptions o;
  o.env = env;
  o.sync_commits = sync;
  std::string error;
  auto s = OpenFileStore(dir, o, nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

// The commit protocol as the FUSE layer drives it, in `piece`-byte writes; on any failure the
// fill is abandoned (the writer's unlink of its .part). Returns the first failure.
StatusCode Fill(IndexedStore& s, const CacheIdentity& id, const Bytes& payload, size_t piece) {
  BlockAddress a = AddressOf(id);
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  if (!r.ok()) return r.status();
  Bytes gpck = EncodePhysicalKey(id);
  StatusCode st = s.SetIdentity(r.value(), gpck);
  if (st == StatusCode::kOk) st = s.OpenWriter(r.value());
  for (size_t at = 0; st == StatusCode::kOk && at < payload.size(); at += piece) {
    size_t n = std::min(piece, payload.size() - at);
    auto w = s.Write(r.value(), at, {payload.data() + at, n});
    if (!w.ok()) st = w.status();
  }
  s.CloseWriter(r.value());
  if (st == StatusCode::kOk) st = s.Commit(r.value());
  if (st != StatusCode::kOk) s.Abort(r.value());
  return st;
}

std::optional<Bytes> ReadAll(IndexedStore& s, const BlockAddress& a) {
  auto r = s.Open(a);
  if (!r.ok()) return std::nullopt;
  Bytes out(r.value()->info().size);
  auto n = r.value()->Read(0, out);
  if (!n.ok() || n.value() != out.size()) return std::nullopt;
  return out;
}

size_t TempFiles(const std::string& dir) {
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir + "/tmp")) n += e.is_regular_file();
  return n;
}

}  // namespace

TEST_CASE("Reliability I/O faults: ENOSPC, EIO and short writes at every call of a 64 KiB commit") {
  test::TempDir tmp;
  const Bytes old_payload = test::Payload(100000, 1);
  {
    auto s = Open(tmp.path(), nullptr);
    REQUIRE(Fill(*s, Key(0), old_payload, 1 << 20) == StatusCode::kOk);
    // Pinned, so nothing is evictable: on ENOSPC the store would otherwise evict it to make
    // room and retry (which the full-disk test covers), and no fault would reach the caller.
    REQUIRE(s->SetPinned(AddressOf(Key(0)), true) == StatusCode::kOk);
  }
  // The Env calls one clean 64 KiB commit in 4 KiB writes makes, by kind.
  const Bytes payload = test::Payload(64 * 1024, 2);
  FaultEnv probe;
  std::vector<FaultEnv::Op> ops;
  {
    auto s = Open(tmp.path(), &probe, /*sync=*/true);
    uint64_t before = probe.calls();
    REQUIRE(Fill(*s, Key(1), payload, 4096) == StatusCode::kOk);
    std::vector<FaultEnv::Op> all = probe.ops();
    ops.assign(all.begin() + static_cast<long>(before), all.end());
    REQUIRE(s->Invalidate(AddressOf(Key(1))) == StatusCode::kOk);
  }
  const uint64_t calls = ops.size();
  REQUIRE(calls >= 16 + 5);  // create, 16 writes, truncate, reads, header, sync, rename, dir sync
  // The block is published by its rename and the directory's sync; what follows (its journal
  // record: a stat and an append) only saves the next start a header read.
  uint64_t published = 0;
  for (uint64_t i = 0; i < calls; i++) {
    if (ops[i] == FaultEnv::Op::kSyncDir) published = i + 1;
  }
  REQUIRE(published > 0);
  REQUIRE(published < calls);
  int injected = 0, after_publication = 0;
  for (FaultEnv::Fault fault : {FaultEnv::Fault::kNoSpace, FaultEnv::Fault::kIoError,
                                FaultEnv::Fault::kShortWrite}) {
    for (uint64_t n = 0; n < calls; n++) {
      FaultEnv env;
      auto s = Open(tmp.path(), &env, /*sync=*/true);
      env.FailCall(n, fault);
      StatusCode st = Fill(*s, Key(1), payload, 4096);
      CAPTURE(n);
      CHECK(TempFiles(tmp.path()) == 0);                  // nothing left behind
      CHECK(ReadAll(*s, AddressOf(Key(0))) == old_payload);  // the old block is still served
      if (n >= published) {
        // The commit stands: the caller was told so, the block is served, the failed journal
        // record is counted, and a restart finds the block.
        CHECK(st == StatusCode::kOk);
        CHECK(ReadAll(*s, AddressOf(Key(1))) == payload);
        CHECK(s->Stats().metadata_errors == (ops[n] == FaultEnv::Op::kAppend ? 1u : 0u));
        CHECK(s->Stats().medium_errors == 0);
        s.reset();
        FileStoreReport report;
        std::string error;
        auto again = OpenFileStore(tmp.path(), {}, &report, &error);
        REQUIRE(again);
        CHECK(ReadAll(*again, AddressOf(Key(1))) == payload);
        REQUIRE(again->Invalidate(AddressOf(Key(1))) == StatusCode::kOk);
        after_publication++;
        injected++;
        continue;
      }
      CHECK(st != StatusCode::kOk);                       // the caller hears it
      CHECK_FALSE(s->Stat(AddressOf(Key(1))).ok());       // nothing committed
      CHECK(s->Lookup(Key(1)).kind == LookupResult::Kind::kMiss);
      // Nothing is wedged: the same fill succeeds once the fault is gone ...
      CHECK(Fill(*s, Key(1), payload, 4096) == StatusCode::kOk);
      CHECK(ReadAll(*s, AddressOf(Key(1))) == payload);
      REQUIRE(s->Invalidate(AddressOf(Key(1))) == StatusCode::kOk);
      s.reset();
      // ... and a restart finds exactly the old block.
      auto again = Open(tmp.path(), nullptr);
      CHECK_FALSE(again->Stat(AddressOf(Key(1))).ok());
      CHECK(ReadAll(*again, AddressOf(Key(0))) == old_payload);
      injected++;
    }
  }
  MESSAGE("io faults: calls_per_commit=" << calls << " injected=" << injected
                                         << " (ENOSPC, EIO, short write at each; " << after_publication
                                         << " after publication) violations=0");
}

TEST_CASE("Reliability power loss: 500 simulated power cuts drop what was not durable") {
  test::TempDir tmp;
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("GPUCACHE_SEED")) seed = std::strtoull(s, nullptr, 10);
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::map<int, Bytes> acked;      // key -> payload of an acknowledged commit
  // key -> the payloads a hit may hold: the acknowledged one and every later attempt (a Stat
  // that fails after the crash point sends a writer to a key whose block is still committed).
  std::map<int, std::vector<Bytes>> attempted;
  int cuts = 0, lost_unsynced = 0, kept = 0, hits_checked = 0, violations = 0;
  uint32_t gen = 0;
  for (int round = 0; round < 500; round++) {
    bool sync = round % 2 == 0;
    FaultEnv env;
    {
      auto s = Open(tmp.path(), &env, sync);
      env.CrashAfter(rng() % 60);
      for (int i = 0; i < 4 && !env.crashed(); i++) {
        int k = static_cast<int>(rng() % 40);
        if (s->Stat(AddressOf(Key(k))).ok()) {
          // Whatever the answer, the block may be gone now; acknowledged with sync_commits, the
          // invalidation holds too: the block the engine called wrong never comes back (review
          // of stop 44: the unlink was not synced). Refused, it may or may not come back.
          bool invalidated = s->Invalidate(AddressOf(Key(k))) == StatusCode::kOk;
          acked.erase(k);
          if (invalidated && sync) attempted[k].clear();
          continue;
        }
        Bytes p = test::Payload(1 + rng() % (96 * 1024), static_cast<uint8_t>(++gen));
        attempted[k].push_back(p);
        if (Fill(*s, Key(k), p, 16 * 1024) == StatusCode::kOk) {
          acked[k] = p;
          attempted[k] = {p};
        }
      }
    }  // the process is gone
    env.PowerLoss();
    cuts++;
    auto s = Open(tmp.path(), nullptr);
    if (TempFiles(tmp.path()) != 0) violations++;
    for (int k = 0; k < 40; k++) {
      BlockAddress a = AddressOf(Key(k));
      std::optional<Bytes> got = s->Stat(a).ok() ? ReadAll(*s, a) : std::nullopt;
      if (got) {
        hits_checked++;
        // Every hit is what a writer wrote for that key: the last acknowledged payload or one
        // tried after it.
        const std::vector<Bytes>& may = attempted[k];
        if (std::find(may.begin(), may.end(), *got) == may.end()) violations++;
        acked[k] = *got;
        attempted[k] = {*got};
        kept++;
      } else if (acked.count(k)) {
        if (sync) violations++;  // acknowledged with sync_commits: must survive a power cut
        lost_unsynced++;
        acked.erase(k);
      }
    }
  }
  MESSAGE("power loss: cuts=" << cuts << " hits_checked=" << hits_checked
                              << " acked_lost_without_sync=" << lost_unsynced
                              << " violations=" << violations << " seed=" << seed);
  CHECK(violations == 0);
  CHECK(cuts == 500);
}

}  // namespace gpucache

namespace gpucache {
namespace {

// Issue 13, defect 8: a failed rename into quarantine was ignored (the block kept its name and
// came back at the next start), and so was a failed unlink.
TEST_CASE("Reliability I/O faults: a block that cannot be quarantined or dropped is counted and never comes back") {
  test::TempDir tmp;
  FaultEnv env;
  const Bytes payload = test::Payload(10000, 3);
  {
    auto s = Open(tmp.path(), &env);
    REQUIRE(Fill(*s, Key(1), payload, 1 << 20) == StatusCode::kOk);
    REQUIRE(Fill(*s, Key(2), payload, 1 << 20) == StatusCode::kOk);
    // An open reader makes the invalidation a quarantine: its rename fails.
    auto reader = s->Open(AddressOf(Key(1)));
    REQUIRE(reader.ok());
    env.FailNext(FaultEnv::Op::kRename, FaultEnv::Fault::kIoError);
    CHECK(s->Invalidate(AddressOf(Key(1))) == StatusCode::kOk);
    CHECK(s->Stats().medium_errors == 1);
    // With no reader it is dropped: its unlink fails.
    env.FailNext(FaultEnv::Op::kRemove, FaultEnv::Fault::kIoError);
    CHECK(s->Invalidate(AddressOf(Key(2))) == StatusCode::kOk);
    CHECK(s->Stats().medium_errors == 2);
  }
  // Neither comes back at the next start: Key(1) was unlinked instead of renamed, Key(2) moved
  // to tmp/ (emptied at every start) instead of unlinked.
  auto s = Open(tmp.path(), nullptr);
  CHECK_FALSE(s->Stat(AddressOf(Key(1))).ok());
  CHECK_FALSE(s->Stat(AddressOf(Key(2))).ok());
  CHECK(TempFiles(tmp.path()) == 0);
}

// Regression (review, 2026-12-07): on a data directory gone read-only (ext4's errors=remount-ro)
// an unlink answered success although the block's file could be neither removed nor moved
// aside, and the next start served the invalidated bytes again. The invalidation now says EIO.
TEST_CASE("Reliability I/O faults: an invalidation whose block stays under its name answers EIO") {
  test::TempDir tmp;
  FaultEnv env;
  const Bytes payload = test::Payload(10000, 4);
  {
    auto s = Open(tmp.path(), &env);
    REQUIRE(Fill(*s, Key(1), payload, 1 << 20) == StatusCode::kOk);
    REQUIRE(Fill(*s, Key(2), payload, 1 << 20) == StatusCode::kOk);
    // Dropped (no reader): its unlink and its move to tmp/ both fail.
    env.FailNext(FaultEnv::Op::kRemove, FaultEnv::Fault::kIoError);
    env.FailNext(FaultEnv::Op::kRename, FaultEnv::Fault::kIoError);
    CHECK(s->Invalidate(AddressOf(Key(1))) == StatusCode::kIoError);
    // Quarantined (an open reader): its rename and its unlink both fail.
    auto reader = s->Open(AddressOf(Key(2)));
    REQUIRE(reader.ok());
    env.FailNext(FaultEnv::Op::kRename, FaultEnv::Fault::kIoError);
    env.FailNext(FaultEnv::Op::kRemove, FaultEnv::Fault::kIoError);
    CHECK(s->Invalidate(AddressOf(Key(2))) == StatusCode::kIoError);
    // Both are misses while the daemon runs, as the engine asked.
    CHECK_FALSE(s->Stat(AddressOf(Key(1))).ok());
    CHECK_FALSE(s->Stat(AddressOf(Key(2))).ok());
  }
  // What the EIO warned of: the next start finds them under their names.
  auto s = Open(tmp.path(), nullptr);
  CHECK(s->Stat(AddressOf(Key(1))).ok());
}

// Regression (review, 2026-12-07): a drain's finish marked the drain finished before its fence,
// and a fence that could not persist the new epoch (a full data directory) left it so: finish
// and rollback were both refused, and new fills stayed refused (EROFS) for good.
TEST_CASE("Reliability I/O faults: a drain whose finish could not persist its epoch may be finished again or rolled back") {
  test::TempDir tmp;
  FaultEnv env;
  auto s = Open(tmp.path(), &env);
  const uint64_t epoch = s->Epoch();
  REQUIRE(s->Drain(DrainAction::kStart) == StatusCode::kOk);
  env.FailNext(FaultEnv::Op::kAppend, FaultEnv::Fault::kNoSpace);  // EPOCH.tmp's write
  CHECK(s->Drain(DrainAction::kFinish) == StatusCode::kNoSpace);
  CHECK(s->Epoch() == epoch);
  CHECK(s->Stats().draining);
  SUBCASE("finished again once there is room") {
    CHECK(s->Drain(DrainAction::kFinish) == StatusCode::kOk);
    CHECK(s->Epoch() == epoch + 1);
  }
  SUBCASE("rolled back") {
    CHECK(s->Drain(DrainAction::kRollback) == StatusCode::kOk);
    CHECK_FALSE(s->Stats().draining);
    CHECK(Fill(*s, Key(9), test::Payload(1000, 9), 1 << 20) == StatusCode::kOk);
  }
  SUBCASE("a finish that failed after one that fenced leaves it finished") {
    REQUIRE(s->Drain(DrainAction::kFinish) == StatusCode::kOk);
    env.FailNext(FaultEnv::Op::kAppend, FaultEnv::Fault::kNoSpace);
    CHECK(s->Drain(DrainAction::kFinish) == StatusCode::kNoSpace);
    CHECK(s->Drain(DrainAction::kRollback) == StatusCode::kInvalidArgument);  // too late
  }
}

}  // namespace
}  // namespace gpucache
