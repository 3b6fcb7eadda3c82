// Eviction policies in isolation, and the trace replay that measures them.
#include <doctest/doctest.h>

#include <algorithm>

#include "store/eviction/eviction_policy.h"
#include "tests/bench/replay.h"

namespace gpucache {
namespace {

auto kAll = [](Slot) { return true; };

// The address digest a test block is counted by (frequency-aware policies).
PolicyKey KeyOf(Slot s) { return 0x9E3779B97F4A7C15ull * (s + 1); }

void Insert(EvictionPolicy& p, Slot s, std::optional<Slot> parent = std::nullopt,
            bool partial = false) {
  p.OnInsert(s, parent, partial, KeyOf(s));
}

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
    for (Slot s : {1, 2, 3}) Insert(*p, s);
    p->OnAccess(1);
  }
  CHECK(fifo->Victim(kAll) == Slot{1});
  CHECK(lru->Victim(kAll) == Slot{2});
  CHECK(lru->Victim([](Slot s) { return s != 2; }) == Slot{3});
  lru->OnRemove(2);
  CHECK(lru->Victim(kAll) == Slot{3});
  CHECK(lru->Victim([](Slot) { return false; }) == std::nullopt);
  // A removed slot is reused by a new block, which is then the most recent.
  Insert(*lru, 2);
  CHECK(lru->Victim(kAll) == Slot{3});
  fifo->OnRemove(1);
  Insert(*fifo, 1);
  CHECK(fifo->Victim(kAll) == Slot{2});
}

TEST_CASE("Policy: prefix-aware policies evict partial blocks, then leaves, then ancestors") {
  for (const char* name : {"prefix-lru", "prefix-tinylfu"}) {
    CAPTURE(name);
    auto p = MakePolicy(name);
    p->SetCapacity(100);
    Insert(*p, 1);                    // root
    Insert(*p, 2, Slot{1});           // child of 1
    Insert(*p, 3, Slot{2}, true);     // partial tail
    Insert(*p, 4);                    // an unrelated leaf, used last
    p->OnAccess(4);
    CHECK(p->Victim(kAll) == Slot{3});
    p->OnRemove(3);
    auto v = p->Victim(kAll);
    CHECK((v == Slot{2} || v == Slot{4}));  // leaves only
    p->OnRemove(2);
    p->OnRemove(4);
    CHECK(p->Victim(kAll) == Slot{1});  // 1 became a leaf
    // With no eligible leaf, an ancestor may go.
    Insert(*p, 5, Slot{1});
    CHECK(p->Victim([](Slot s) { return s != 5; }) == Slot{1});
  }
}

TEST_CASE("Policy: a slot reused after its block left is not the parent of that block's children") {
  for (const char* name : {"prefix-lru", "prefix-tinylfu"}) {
    CAPTURE(name);
    auto p = MakePolicy(name);
    p->SetCapacity(100);
    Insert(*p, 1);  // root
    for (Slot child : {2, 3, 4}) Insert(*p, child, Slot{1});
    p->OnRemove(3);  // a middle sibling, then the first
    p->OnRemove(2);
    CHECK(p->Victim(kAll) == Slot{4});  // 1 still has a child
    p->OnRemove(1);            // the ancestor leaves before its child (invalidated)
    Insert(*p, 1);             // slot 1 now holds an unrelated block...
    Insert(*p, 5, Slot{1});    // ...with a child of its own
    p->OnRemove(4);            // the old child leaves: the new block in slot 1 keeps its child
    p->OnAccess(5);            // (used more than slot 1: prefix-tinylfu would pick 1 if it were
    p->OnAccess(5);            // a leaf)
    CHECK(p->Victim(kAll) == Slot{5});
    CHECK(p->Victim([](Slot s) { return s != 5; }) == Slot{1});  // no leaf eligible
  }
}

// prefix-lru keeps partial and full blocks in one list, the partial ones first: each kind in
// its own least-recent-first order, whatever the order of inserts, uses and removals.
TEST_CASE("Policy: prefix-lru orders partial blocks among themselves, all before full ones") {
  auto p = MakePolicy("prefix-lru");
  auto except = [](std::vector<Slot> out) {
    return [out](Slot s) { return std::find(out.begin(), out.end(), s) == out.end(); };
  };
  Insert(*p, 1);
  Insert(*p, 2, std::nullopt, true);
  Insert(*p, 3);
  Insert(*p, 4, std::nullopt, true);
  CHECK(p->Victim(kAll) == Slot{2});
  p->OnAccess(2);
  CHECK(p->Victim(kAll) == Slot{4});
  CHECK(p->Victim(except({2, 4})) == Slot{1});
  p->OnAccess(1);
  CHECK(p->Victim(except({2, 4})) == Slot{3});
  p->OnRemove(3);                     // the first full block leaves
  Insert(*p, 5, std::nullopt, true);  // still goes before every full block
  CHECK(p->Victim(kAll) == Slot{4});
  CHECK(p->Victim(except({2, 4, 5})) == Slot{1});
  for (Slot s : {4, 2, 5}) p->OnRemove(s);
  CHECK(p->Victim(kAll) == Slot{1});
  Insert(*p, 6, std::nullopt, true);
  CHECK(p->Victim(kAll) == Slot{6});
  p->OnRemove(1);  // no full block left
  Insert(*p, 7);
  CHECK(p->Victim(except({6})) == Slot{7});
  CHECK(p->Victim(kAll) == Slot{6});
  p->OnAccess(6);
  p->OnAccess(7);
  CHECK(p->Victim(kAll) == Slot{6});
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
