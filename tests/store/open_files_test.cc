// limits.max_open_files (store/limits.h): each fill and each block open for reading holds one of
// the daemon's descriptors, and one tenant's are bounded, so that an engine leaking descriptors
// cannot take the daemon's table from every other tenant (review, 2026-12-07: one tenant's
// opens filled it, and every tenant's opens and commits were EAGAIN).
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "store/memory_store.h"
#include "tests/support/commit_block.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

CacheIdentity Block(const std::string& tenant, uint8_t n) {
  CacheIdentity id = SampleIdentity(tenant, 16);
  id.chain[0] = test::Hash(n);
  return id;
}

void Commit(IndexedStore& s, const CacheIdentity& id) { test::CommitBlock(s, id, Payload(100), kOwner); }

TEST_CASE("Open files: a tenant's readers and fills stop at its bound, and another tenant's do not") {
  StoreOptions o;
  o.limits.global.max_open_files = 3;  // each tenant's, not all together
  MemoryStore s(o);
  const CacheIdentity a = Block("acme", 1), g = Block("globex", 2);
  Commit(s, a);
  Commit(s, g);
  std::vector<std::shared_ptr<BlockReader>> held;
  for (int i = 0; i < 3; ++i) {
    auto r = s.Open(AddressOf(a));
    REQUIRE(r.ok());
    held.push_back(r.value());
  }
  CHECK(s.Open(AddressOf(a)).status() == StatusCode::kExhausted);
  CHECK(s.Stats().tenants["acme"].usage.open_readers == 3);
  // A fill holds a descriptor as a reader does: refused too, and nothing reserved.
  const BlockAddress next = AddressOf(Block("acme", 3));
  CHECK(s.Reserve(next, kOwner).status() == StatusCode::kExhausted);
  CHECK(s.FindReservation(next) == std::nullopt);
  // The other tenant is not held back by acme's descriptors.
  for (int i = 0; i < 3; ++i) {
    auto r = s.Open(AddressOf(g));
    REQUIRE(r.ok());
    held.push_back(r.value());
  }
  // A reader's close gives its descriptor back.
  held.erase(held.begin());
  CHECK(s.Stats().tenants["acme"].usage.open_readers == 2);
  auto again = s.Open(AddressOf(a));
  REQUIRE(again.ok());
  held.push_back(std::move(again.value()));
  held.clear();
  CHECK(s.Stats().tenants["acme"].usage.open_readers == 0);
  CHECK(s.Stats().tenants["globex"].usage.open_readers == 0);
}

TEST_CASE("Open files: fills count, a tenant's own bound is the stricter, and a quarantined reader still counts") {
  StoreOptions o;
  o.limits.global.max_open_files = 10;
  o.limits.tenants["acme"].max_open_files = 2;
  MemoryStore s(o);
  const CacheIdentity a = Block("acme", 1);
  Commit(s, a);
  auto fill = s.Reserve(AddressOf(Block("acme", 2)), kOwner);
  REQUIRE(fill.ok());
  auto reader = s.Open(AddressOf(a));
  REQUIRE(reader.ok());
  CHECK(s.Open(AddressOf(a)).status() == StatusCode::kExhausted);
  s.Abort(fill.value());
  // Invalidated while open: the reader keeps its descriptor (and its bytes) until it closes.
  REQUIRE(s.Invalidate(AddressOf(a)) == StatusCode::kOk);
  CHECK(s.Stats().tenants["acme"].usage.open_readers == 1);
  REQUIRE(s.Reserve(AddressOf(Block("acme", 3)), kOwner).ok());
  CHECK(s.Reserve(AddressOf(Block("acme", 4)), kOwner).status() == StatusCode::kExhausted);
  reader.value().reset();
  CHECK(s.Stats().tenants["acme"].usage.open_readers == 0);
  CHECK(s.Reserve(AddressOf(Block("acme", 4)), kOwner).ok());
}

TEST_CASE("Open files: 0 bounds nothing in the store, and the store's own copies are not counted") {
  MemoryStore s(StoreOptions{});
  const CacheIdentity a = Block("acme", 1);
  Commit(s, a);
  std::vector<std::shared_ptr<BlockReader>> held;
  for (int i = 0; i < 100; ++i) {
    auto r = s.Open(AddressOf(a));
    REQUIRE(r.ok());
    held.push_back(r.value());
  }
  auto copy = s.OpenForCopy(AddressOf(a));
  REQUIRE(copy.ok());
  CHECK(s.Stats().tenants["acme"].usage.open_readers == 100);
}

}  // namespace
}  // namespace gpucache
