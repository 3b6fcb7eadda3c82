// Stopping the cold tier: a stop ends the background round and a running async pack after the
// upload in flight, without starting another (a stopping daemon's object store may never answer).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cold/control.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

namespace {
const Principal kAdmin{.uid = 0, .gid = 0, .admin = true};
}  // namespace

namespace {
// A PUT that stalls, then fails as a timeout would: the object store of a stopping daemon.
// Counts the PUTs that reached it.
MemoryObjectStore::FaultFn StalledPuts(std::atomic<int>& puts, std::chrono::milliseconds stall, bool fail) {
  return [&puts, stall, fail](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb != "PUT") return std::nullopt;
    puts++;
    std::this_thread::sleep_for(stall);
    if (!fail) return std::nullopt;
    return ObjectError{ObjectErrorKind::kTemporary, 0, "CURLE_OPERATION_TIMEDOUT", "", true};
  };
}

}  // namespace

// Regression (review, 2026-12-06): ColdTier::Stop waited for the background round, which
// attempted every due job: against a stalled S3 (256 jobs, 4 at a time, 30 s each) far past
// systemd's TimeoutStopSec, so the daemon was killed before the hot store wrote its INDEX.
TEST_CASE("Cold tier: Stop ends the background round after the upload in flight, not every due job") {
  MemoryStore hot;
  MemoryObjectStore s3;
  std::atomic<int> puts{0};
  s3.SetFault(StalledPuts(puts, std::chrono::milliseconds(300), /*fail=*/true));
  ColdTierOptions o = OneBlockPacks();
  o.write_back = WriteBack::kAfterCommit;
  o.flush_interval_ms = 20;
  ColdTier tier(hot, s3, o, TestKeys());
  std::atomic<bool> aborted{false};
  tier.SetStopHook([&] { aborted = true; });
  for (int i = 1; i <= 20; i++) {
    REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
    tier.OnCommitted(AddressOf(NthIdentity(i)));
  }
  tier.Start();
  while (puts == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a round began
  tier.Stop();
  CHECK(aborted);    // the owner's hook ended the requests in flight
  CHECK(puts.load() <= 2);  // the upload in flight; before, all 20 due jobs were attempted (6 s)
  SinkStats st = tier.Stats().sink;
  CHECK(st.submitted == 20);
  CHECK(st.in_flight == 0);
  CHECK(st.pending + st.failed_now == 20);  // left as a crash would: the next backfill packs them
  CHECK(st.Balanced());
}

// Regression (review, 2026-12-06): a running cold.pack never looked at a stop: the tier's
// destructor waited for the whole backfill (and its 60 s waits for room in the sink).
TEST_CASE("Cold tier: stopping ends a running async pack: no block read, no upload started after it") {
  MemoryStore hot;
  MemoryObjectStore s3;
  std::atomic<int> puts{0};
  s3.SetFault(StalledPuts(puts, std::chrono::milliseconds(100), /*fail=*/false));
  auto tier = std::make_unique<ColdTier>(hot, s3, OneBlockPacks(), TestKeys());
  for (int i = 1; i <= 30; i++) REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
  json r = json::parse(HandleColdRequest(*tier, kAdmin, json{{"op", "cold.pack"}, {"async", true}}.dump()));
  REQUIRE(r["ok"] == true);
  while (puts == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // it uploads
  tier.reset();
  CHECK(puts.load() <= 6);  // before, the whole backfill: 30 packs of 3 PUTs each
}

}  // namespace gpucache::cold
