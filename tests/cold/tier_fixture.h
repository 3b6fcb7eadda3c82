// A ColdTier over a MemoryStore and an in-memory object store, written back by hand (no
// background rounds), and the principals the control tests act as: tier_control_test.cc and
// async_control_test.cc.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "cold/control.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold::testing {

inline const Principal kAdmin{.uid = 0, .gid = 0, .admin = true};
inline const Principal kAcme{.uid = 1000, .gid = 1000, .admin = false, .tenants = {"acme"}};

struct TierFixture {
  MemoryStore hot;
  MemoryObjectStore s3;
  std::unique_ptr<ColdTier> tier;
  explicit TierFixture(std::set<std::string> retired = {}, uint64_t flush_interval_ms = 2000,
                       size_t known_places = 65536, uint64_t follow_fill_ms = 5000) {
    ColdTierOptions o;
    o.follow_fill_ms = follow_fill_ms;
    o.known_places = known_places;
    o.flush_interval_ms = flush_interval_ms;
    o.prefix = kPrefix;
    o.write_back = WriteBack::kManual;
    o.retired_tenants = std::move(retired);
    o.sink.backoff_base_ms = 1;
    o.sink.backoff_max_ms = 2;
    o.sink.redrive_interval_ms = 0;
    tier = std::make_unique<ColdTier>(hot, s3, o, TestKeys());
  }
  nlohmann::json Ctl(const Principal& who, const nlohmann::json& req) {
    return nlohmann::json::parse(HandleColdRequest(*tier, who, req.dump()));
  }
  // Polls cold.op for `op_id` as `who` until it is done (10 s at most): its last answer.
  nlohmann::json WaitForOp(const Principal& who, const nlohmann::json& op_id) {
    nlohmann::json answer;
    for (int i = 0; i < 2000; i++) {
      answer = Ctl(who, {{"op", "cold.op"}, {"op_id", op_id}});
      if (answer.value("state", "") == "done") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return answer;
  }
  void Commit(int i, std::string tenant = "acme", size_t size = 1000) {
    REQUIRE(CommitBlock(hot, NthIdentity(i, tenant), PayloadOf(i, size)) == StatusCode::kOk);
  }
  nlohmann::json Refill(int i, std::string tenant = "acme") {
    return Ctl(kAdmin, {{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(NthIdentity(i, tenant)))}});
  }
};

}  // namespace gpucache::cold::testing
