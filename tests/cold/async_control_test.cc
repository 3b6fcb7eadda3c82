// The cold tier's asynchronous control requests ("async": true, then cold.op) over an
// in-memory object store: refills and packs answered through op ids, and async packs kept off
// the refill workers.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cold/tier_fixture.h"

namespace gpucache::cold {
using namespace testing;
using nlohmann::json;

TEST_CASE("Cold control: an async refill returns an op id at once, its owner polls the answer") {
  TierFixture f;
  f.Commit(3);
  f.Ctl(kAdmin, {{"op", "cold.pack"}});
  REQUIRE(f.hot.Evict(AddressOf(NthIdentity(3))) == StatusCode::kOk);
  std::string id = HexEncode(EncodePhysicalKey(NthIdentity(3)));
  json queued = f.Ctl(kAcme, {{"op", "cold.refill"}, {"identity", id}, {"async", true}});
  REQUIRE(queued["ok"] == true);
  REQUIRE(queued.contains("op_id"));
  // Another user learns nothing of it.
  Principal other{.uid = 2000, .gid = 2000, .admin = false, .tenants = {"globex"}};
  CHECK(f.Ctl(other, {{"op", "cold.op"}, {"op_id", queued["op_id"]}})["errno"] == "ENOENT");
  json done = f.WaitForOp(kAcme, queued["op_id"]);
  CHECK(done["state"] == "done");
  CHECK(done["result"] == "hit");
  // Answered once, then forgotten.
  CHECK(f.Ctl(kAcme, {{"op", "cold.op"}, {"op_id", queued["op_id"]}})["errno"] == "ENOENT");
  // A refusal comes back the same way (`other` is a member of a tenant, not of this one).
  json denied = f.Ctl(other, {{"op", "cold.refill"}, {"identity", id}, {"async", true}});
  json answer = f.WaitForOp(other, denied["op_id"]);
  CHECK(answer["errno"] == "EACCES");
}

// Review (2026-12-07): every uid of no tenant had a quarter of the async slots of its own
// ("uid:N"), its refills refused only on a worker and the refusals held until polled: four
// such users, never polling, kept every tenant's async refills at EAGAIN.
TEST_CASE("Cold control: a caller of no tenant is refused at once and holds no async slot") {
  TierFixture f;
  f.Commit(3);
  const std::string id = HexEncode(EncodePhysicalKey(NthIdentity(3)));
  for (uint32_t uid = 3000; uid < 3004; uid++) {
    Principal stranger{.uid = uid, .gid = uid, .admin = false, .tenants = {}};
    for (size_t i = 0; i < f.tier->async_ops().ShareOfOneKey() + 1; i++) {
      json r = f.Ctl(stranger, {{"op", "cold.refill"}, {"identity", id}, {"async", true}});
      REQUIRE(r["errno"] == "EACCES");
      CHECK_FALSE(r.contains("op_id"));
    }
    CHECK(f.Ctl(stranger, {{"op", "cold.pack"}, {"async", true}})["errno"] == "EACCES");
  }
  json mine = f.Ctl(kAcme, {{"op", "cold.refill"}, {"identity", id}, {"async", true}});
  REQUIRE(mine["ok"] == true);
  CHECK(f.WaitForOp(kAcme, mine["op_id"])["state"] == "done");
}

TEST_CASE("Cold control: an async pack runs on the workers and answers through its op id") {
  TierFixture f;
  for (int i = 0; i < 5; i++) f.Commit(i);
  // While the pack's first upload is held up, the control request has already been answered.
  std::timed_mutex gate;  // timed: a pack that runs inside the request must not hang the test
  gate.lock();
  f.s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT" && r.key.find("/packs/") != std::string::npos) {
      if (gate.try_lock_for(std::chrono::seconds(5))) gate.unlock();  // until the test saw the op
    }
    return std::nullopt;
  });
  json queued = f.Ctl(kAcme, {{"op", "cold.pack"}, {"tenant", "acme"}, {"async", true}});
  REQUIRE(queued["ok"] == true);
  REQUIRE(queued.contains("op_id"));
  CHECK_FALSE(queued.contains("blocks"));  // not the pack's report: it has not run yet
  json polled = f.Ctl(kAcme, {{"op", "cold.op"}, {"op_id", queued["op_id"]}});
  CHECK(polled["ok"] == true);
  CHECK(polled["state"] != "done");
  gate.unlock();
  json done = f.WaitForOp(kAcme, queued["op_id"]);
  CHECK(done["state"] == "done");
  CHECK(done["blocks"] == 5);
  CHECK(done["complete"] == true);
  // Refusals are answered at once, without an op: a non-member, a bad "async".
  CHECK(f.Ctl(kAcme, {{"op", "cold.pack"}, {"async", true}})["errno"] == "EACCES");
  CHECK(f.Ctl(kAdmin, {{"op", "cold.pack"}, {"async", 1}})["errno"] == "EINVAL");
}

TEST_CASE("Cold control: two async packs do not pack the same blocks twice") {
  TierFixture f;
  for (int i = 0; i < 6; i++) f.Commit(i);
  json a = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"async", true}});
  json b = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"async", true}});
  json ra = f.WaitForOp(kAdmin, a["op_id"]), rb = f.WaitForOp(kAdmin, b["op_id"]);
  CHECK(ra["blocks"].get<int>() + rb["blocks"].get<int>() == 6);  // each block packed once
  CHECK(ra["skipped_cold"].get<int>() + rb["skipped_cold"].get<int>() == 6);
  CHECK(f.tier->Stats().sink.submitted == ra["packs"].get<uint64_t>() + rb["packs"].get<uint64_t>());
}

TEST_CASE("Cold control: cold.op checks wait_ms") {
  TierFixture f;
  CHECK(f.Ctl(kAdmin, {{"op", "cold.op"}, {"op_id", 1}, {"wait_ms", -1}})["errno"] == "EINVAL");
  CHECK(f.Ctl(kAdmin, {{"op", "cold.op"}, {"op_id", 1}, {"wait_ms", 10001}})["errno"] == "EINVAL");
  CHECK(f.Ctl(kAdmin, {{"op", "cold.op"}, {"op_id", 1}, {"wait_ms", 5}})["errno"] == "ENOENT");
}

TEST_CASE("Cold control: a pack reports the uploads of its own packs while background rounds run") {
  // Background write-back rounds every millisecond: before the fix they took a running pack's
  // jobs, and the pack said "uploaded": 0 for a pack that was in S3 (a flaky mount test).
  TierFixture f({}, /*flush_interval_ms=*/1);
  f.tier->Start();
  for (int i = 0; i < 30; i++) {
    f.Commit(i);
    json r = f.Ctl(kAdmin, {{"op", "cold.pack"}, {"tenant", "acme"}});
    CAPTURE(r.dump());
    REQUIRE(r["blocks"] == 1);
    CHECK(r["drain"]["uploaded"] == 1);
  }
  f.tier->Stop();
}

namespace {
// Forwards to a MemoryObjectStore, holding every PUT until Release() (at most 10 s): a pack
// that uploads stays running, and nothing else waits behind the fake's lock meanwhile.
class HeldPuts final : public ForwardingObjectStore {
 public:
  explicit HeldPuts(MemoryObjectStore& inner) : ForwardingObjectStore(inner) {}
  int held() const { return held_; }
  void Release() {
    std::lock_guard l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) override {
    Hold();
    return inner_.Put(key, body);
  }
  ObjectResult<Done> PutHashed(std::string_view key, std::span<const uint8_t> body, std::string_view sha) override {
    Hold();
    return inner_.PutHashed(key, body, sha);
  }

 private:
  void Hold() {
    std::unique_lock l(mu_);
    held_++;
    cv_.wait_for(l, std::chrono::seconds(10), [&] { return released_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> held_{0};
  bool released_ = false;
};
}  // namespace

// Regression (review, 2026-12-06): an async cold.pack ran on the refill workers, and a second
// one waited there for the first (packs run one at a time): one tenant's packs held every
// worker, and other tenants' refills waited behind them for as long as the packs ran.
TEST_CASE("Cold control: async packs never hold the refill workers: another tenant's refill runs") {
  MemoryStore hot;
  MemoryObjectStore s3;
  HeldPuts held(s3);
  ColdTierOptions o = OneBlockPacks();
  o.refill_workers = 1;
  ColdTier tier(hot, held, o, TestKeys());
  for (int i = 1; i <= 4; i++) REQUIRE(CommitBlock(hot, NthIdentity(i), PayloadOf(i, 1000)) == StatusCode::kOk);
  const Principal globex{.uid = 2000, .gid = 2000, .admin = false, .tenants = {"globex"}};
  auto ctl = [&](const Principal& who, const json& req) {
    return json::parse(HandleColdRequest(tier, who, req.dump()));
  };
  json packs[2];
  for (json& p : packs) {
    p = ctl(kAcme, {{"op", "cold.pack"}, {"tenant", "acme"}, {"async", true}});
    REQUIRE(p["ok"] == true);
  }
  while (held.held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the first uploads
  json q = ctl(globex, {{"op", "cold.refill"}, {"async", true},
                        {"identity", HexEncode(EncodePhysicalKey(NthIdentity(1, "globex")))}});
  REQUIRE(q["ok"] == true);
  json r = ctl(globex, {{"op", "cold.op"}, {"op_id", q["op_id"]}, {"wait_ms", 5000}});
  CHECK(r["state"] == "done");  // before: "queued" behind the packs, for as long as they ran
  CHECK(r["result"] == "missing");
  held.Release();
  for (const json& p : packs) {
    json done = ctl(kAcme, {{"op", "cold.op"}, {"op_id", p["op_id"]}, {"wait_ms", 10000}});
    CHECK(done["state"] == "done");
    CHECK(done["complete"] == true);
  }
}

}  // namespace gpucache::cold
