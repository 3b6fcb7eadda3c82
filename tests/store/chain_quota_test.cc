// Eviction for a commit keeps the commit's own resident ancestors (Admission::RoomForCommit):
// a block a chain's next block extends is no childless leaf to that commit.
#include <doctest/doctest.h>

#include <string>

#include "store/eviction/eviction_policy.h"
#include "store/memory_store.h"
#include "tests/support/commit_block.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

using test::Payload;

const Owner kOwner{1000, 1000};

StatusCode Commit(IndexedStore& s, const CacheIdentity& id, size_t size) {
  return test::TryCommit(s, id, Payload(size), kOwner);
}

bool Present(IndexedStore& s, const CacheIdentity& id) { return s.Stat(AddressOf(id)).ok(); }

// Blocks 0..n-1 of one prompt: block i continues block i-1's chain.
std::vector<CacheIdentity> Chain(size_t n, uint8_t seed) {
  std::vector<CacheIdentity> blocks;
  for (size_t i = 0; i < n; ++i) {
    CacheIdentity id = test::SampleIdentity("acme", 16);
    id.chain = {i == 0 ? test::Hash(seed) : blocks.back().chain.back(), test::Hash(static_cast<uint8_t>(seed + 1 + i))};
    blocks.push_back(id);
  }
  return blocks;
}

// Regression (review, 2026-12-07): a chain longer than the quota, committed in order, evicted
// the block each commit extended (a leaf then), and kept only its last blocks (prefix-lru and
// prefix-reuse kept 3, 4, 5 of 0..5): no prefix lookup reaches them, a hit ratio of 0 where
// keeping 0, 1, 2 serves three blocks. The commit past the quota is refused instead.
TEST_CASE("Chain quota: a chain longer than the quota keeps its first blocks, under every policy") {
  for (const std::string& policy : PolicyNames()) {
    CAPTURE(policy);
    StoreOptions o;
    o.limits.tenants["acme"].max_retained_bytes = 3000;
    o.eviction_policy = policy;
    MemoryStore s(o);
    std::vector<CacheIdentity> chain = Chain(6, 10);
    for (size_t i = 0; i < chain.size(); ++i) {
      CAPTURE(i);
      CHECK(Commit(s, chain[i], 1000) == (i < 3 ? StatusCode::kOk : StatusCode::kTenantQuota));
    }
    for (size_t i = 0; i < 3; ++i) CHECK(Present(s, chain[i]));
  }
}

TEST_CASE("Chain quota: a commit still evicts blocks that are not its ancestors") {
  for (const std::string& policy : PolicyNames()) {
    CAPTURE(policy);
    StoreOptions o;
    o.limits.tenants["acme"].max_retained_bytes = 3000;
    o.eviction_policy = policy;
    MemoryStore s(o);
    std::vector<CacheIdentity> other = Chain(1, 100), chain = Chain(3, 10);
    REQUIRE(Commit(s, other[0], 1000) == StatusCode::kOk);
    REQUIRE(Commit(s, chain[0], 1000) == StatusCode::kOk);
    REQUIRE(Commit(s, chain[1], 1000) == StatusCode::kOk);
    CHECK(Commit(s, chain[2], 1000) == StatusCode::kOk);
    CHECK_FALSE(Present(s, other[0]));
    for (const CacheIdentity& id : chain) CHECK(Present(s, id));
  }
}

}  // namespace
}  // namespace gpucache
