// Eviction policies in isolation, and the trace replay that measures them.
#include <doctest/doctest.h>

#include "store/eviction/eviction_policy.h"
#include "tests/bench/replay.h"

namespace gpucache {
namespace {

auto kAll = [](PolicyKey) { return true; };

TEST_CASE("Policy: every name makes a policy, unknown names do not") {
  for (const std::string& name : PolicyNames()) {
    auto p = MakePolicy(name);
    REQUIRE(p);
    CHECK(p->name() == name);
  }
  CHECK(MakePolicy("mru") == nullptr);
  CHECK(MakePolicy(kDefaultPolicy) != nullptr);
}

TEST_CASE("Policy: oldest is FIFO, lru follows use") {
  auto fifo = MakePolicy("oldest"), lru = MakePolicy("lru");
  for (auto* p : {fifo.get(), lru.get()}) {
    for (PolicyKey k : {1, 2, 3}) p->OnInsert(k, std::nullopt, false);
    p->OnAccess(1);
  }
  CHECK(fifo->Victim(kAll) == PolicyKey{1});
  CHECK(lru->Victim(kAll) == PolicyKey{2});
  CHECK(lru->Victim([](PolicyKey k) { return k != 2; }) == PolicyKey{3});
  lru->OnRemove(2);
  CHECK(lru->Victim(kAll) == PolicyKey{3});
  CHECK(lru->Victim([](PolicyKey) { return false; }) == std::nullopt);
}

TEST_CASE("Policy: prefix-aware policies evict partial blocks, then leaves, then ancestors") {
  for (const char* name : {"prefix-lru", "prefix-tinylfu"}) {
    CAPTURE(name);
    auto p = MakePolicy(name);
    p->SetCapacity(100);
    p->OnInsert(1, std::nullopt, false);  // root
    p->OnInsert(2, PolicyKey{1}, false);  // child of 1
    p->OnInsert(3, PolicyKey{2}, true);   // partial tail
    p->OnInsert(4, std::nullopt, false);  // an unrelated leaf, used last
    p->OnAccess(4);
    CHECK(p->Victim(kAll) == PolicyKey{3});
    p->OnRemove(3);
    auto v = p->Victim(kAll);
    CHECK((v == PolicyKey{2} || v == PolicyKey{4}));  // leaves only
    p->OnRemove(2);
    p->OnRemove(4);
    CHECK(p->Victim(kAll) == PolicyKey{1});  // 1 became a leaf
    // With no eligible leaf, an ancestor may go.
    p->OnInsert(5, PolicyKey{1}, false);
    CHECK(p->Victim([](PolicyKey k) { return k != 5; }) == PolicyKey{1});
  }
}

std::vector<replay::Request> TinyTrace() {
  // Two conversations sharing block 0; the second turn of each extends the first.
  return {
      {0, 1024, {0, 1}},        // 2 full blocks
      {1, 1024, {0, 2}},
      {2, 1536, {0, 1, 3}},     // hit: 0, 1
      {3, 1536, {0, 2, 4}},     // hit: 0, 2
  };
}

TEST_CASE("Replay: hit ratio counts the leading run of present blocks, in tokens") {
  auto trace = TinyTrace();
  auto lru = MakePolicy("lru");
  replay::Score big = replay::ReplayPolicy(trace, *lru, 100);
  CHECK(big.input_tokens == 1024 + 1024 + 1536 + 1536);
  CHECK(big.hit_tokens == 512 + 1024 + 1024);  // request 2 hits block 0; 3 and 4 hit two blocks
  CHECK(replay::ReplayBelady(trace, 100).hit_tokens == big.hit_tokens);
  CHECK(replay::UniqueBlocks(trace) == 5);
}

TEST_CASE("Replay: Belady is never beaten, whatever the policy and capacity") {
  auto trace = TinyTrace();
  for (uint64_t capacity : {1, 2, 3, 4}) {
    uint64_t best = replay::ReplayBelady(trace, capacity).hit_tokens;
    for (const std::string& name : PolicyNames()) {
      auto p = MakePolicy(name);
      CAPTURE(name);
      CAPTURE(capacity);
      CHECK(replay::ReplayPolicy(trace, *p, capacity).hit_tokens <= best);
    }
  }
}

}  // namespace
}  // namespace gpucache
