// Listing the store (readdir's ListEntries, the cold pack's VisitBlocks): a pass over every
// record, taken a slice at a time under the store's lock. These cases span several slices and
// change the store between them.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "store/block_index.h"
#include "store/memory_store.h"
#include "tests/store/store_parts_test.h"
#include "tests/support/commit_block.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

using test::SampleIdentity;

const Owner kOwner{1000, 1000};

// Block `i` of `tenant` in namespace `ns` (the namespace is the tensor-parallel rank, a field
// its name digests).
CacheIdentity Nth(const std::string& tenant, int ns, uint32_t i) {
  CacheIdentity id = SampleIdentity(tenant, 1);
  id.tp_rank = static_cast<uint32_t>(ns);
  id.tp_size = 4;
  for (int b = 0; b < 4; ++b) id.chain[1][b] = static_cast<uint8_t>(i >> (8 * b));
  return id;
}

void Commit(BlockStore& s, const CacheIdentity& id) {
  test::CommitBlock(s, id, test::Payload(16, static_cast<uint8_t>(id.tp_rank)), kOwner);
}

// Each address visited, with how many times.
std::map<std::string, int> Visits(BlockStore& s, const std::string& tenant) {
  std::map<std::string, int> seen;
  s.VisitBlocks(tenant, [&](const BlockAddress& a) {
    seen[a.RelativePath()]++;
    return true;
  });
  return seen;
}

TEST_CASE("BlockIndex: a pass in slices visits every block that stays put exactly once") {
  BlockIndex index;
  std::vector<BlockIndex::Id> ids;
  for (uint32_t i = 0; i < 100; ++i) {
    auto got = index.Insert(test::Block(test::BlockNo("acme", i), test::RecordOf(1), test::FullKeys(), kOwner));
    REQUIRE(got);
    ids.push_back(*got);
  }
  std::map<BlockIndex::Id, int> seen;
  std::optional<BlockIndex::Id> from = 0;
  int slices = 0;
  while (from) {
    from = index.ForEachFrom(*from, 7, [&](BlockIndex::Id id) { seen[id]++; });
    if (++slices == 3) {
      // Between slices: a block not reached yet leaves, one already visited leaves, and two new
      // ones come (into the freed ids first, then past the end).
      index.Remove(ids[90]);
      index.Remove(ids[1]);
      for (uint32_t i = 1000; i < 1002; ++i) {
        REQUIRE(index.Insert(test::Block(test::BlockNo("acme", i), test::RecordOf(1), test::FullKeys(), kOwner)));
      }
    }
  }
  CHECK(slices >= 100 / 7);
  for (size_t k = 0; k < ids.size(); ++k) {
    CAPTURE(k);
    if (k == 90 || k == 1) continue;
    CHECK(seen[ids[k]] == 1);
  }
  for (const auto& [id, n] : seen) CHECK(n == 1);
  // The pass ended: a slice from past the last id visits nothing.
  CHECK_FALSE(index.ForEachFrom(10000, 7, [](BlockIndex::Id) { FAIL("past the end"); }));
}

TEST_CASE("Store listing: more blocks than a slice, in several namespaces and tenants") {
  MemoryStore s;
  // 40,000 blocks (the store takes 16,384 records per hold of its lock): acme in three
  // namespaces, globex in one, interleaved so that every slice holds both tenants.
  std::map<int, std::vector<std::string>> acme_names;
  for (uint32_t i = 0; i < 40000; ++i) {
    bool globex = i % 4 == 3;
    CacheIdentity id = Nth(globex ? "globex" : "acme", globex ? 0 : static_cast<int>(i % 3), i);
    Commit(s, id);
    if (!globex) acme_names[static_cast<int>(i % 3)].push_back(AddressOf(id).block);
  }
  for (auto& [ns, names] : acme_names) {
    CAPTURE(ns);
    std::sort(names.begin(), names.end());
    CHECK(s.ListEntries("acme", AddressOf(Nth("acme", ns, 0)).ns) == names);
  }
  std::map<std::string, int> acme = Visits(s, "acme");
  CHECK(acme.size() == 30000);
  CHECK(std::all_of(acme.begin(), acme.end(), [](const auto& v) {
    return v.second == 1 && v.first.starts_with("acme/");
  }));
  CHECK(Visits(s, "globex").size() == 10000);
  CHECK(Visits(s, "initech").empty());

  // A visit may call the store (it runs outside its lock), and false stops the pass.
  int visited = 0;
  s.VisitBlocks("acme", [&](const BlockAddress& a) {
    CHECK(s.Stat(a).ok());
    return ++visited < 20000;
  });
  CHECK(visited == 20000);
}

TEST_CASE("Store listing: blocks that stay put are visited once while others come and go") {
  MemoryStore s;
  std::vector<BlockAddress> all;
  for (uint32_t i = 0; i < 40000; ++i) {
    Commit(s, Nth("acme", 0, i));
    all.push_back(AddressOf(Nth("acme", 0, i)));
  }
  // During the pass: the last 1,000 blocks are invalidated and 1,000 new ones committed.
  std::set<std::string> gone;
  std::map<std::string, int> seen;
  bool changed = false;
  s.VisitBlocks("acme", [&](const BlockAddress& a) {
    seen[a.RelativePath()]++;
    if (!changed) {
      changed = true;
      for (uint32_t i = 39000; i < 40000; ++i) {
        REQUIRE(s.Invalidate(all[i]) == StatusCode::kOk);
        gone.insert(all[i].RelativePath());
      }
      for (uint32_t i = 50000; i < 51000; ++i) Commit(s, Nth("acme", 0, i));
    }
    return true;
  });
  for (uint32_t i = 0; i < 39000; ++i) {
    if (seen[all[i].RelativePath()] != 1) FAIL_CHECK("visited " << seen[all[i].RelativePath()] << " times: " << i);
  }
  for (const auto& [path, n] : seen) CHECK(n == 1);
  for (const std::string& g : gone) CHECK(!seen.contains(g));  // removed before its slice
}

TEST_CASE("Store listing: a block that leaves and comes back during the pass is named once") {
  StoreOptions o;
  MemoryStore* store = nullptr;
  bool once = false;
  // Between the first and the second slice: block 0 (named in the first) leaves, another block
  // takes its id, and block 0 is committed again at the end of the index, in a later slice.
  o.between_list_slices = [&] {
    if (std::exchange(once, true)) return;
    REQUIRE(store->Invalidate(AddressOf(Nth("acme", 0, 0))) == StatusCode::kOk);
    Commit(*store, Nth("acme", 0, 20000));
    Commit(*store, Nth("acme", 0, 0));
  };
  MemoryStore s(o);
  store = &s;
  for (uint32_t i = 0; i < 16385; ++i) Commit(s, Nth("acme", 0, i));
  BlockAddress a = AddressOf(Nth("acme", 0, 0));
  std::vector<std::string> names = s.ListEntries(a.tenant, a.ns);
  REQUIRE(once);
  CHECK(std::count(names.begin(), names.end(), a.block) == 1);
  CHECK(names.size() == 16385);  // block 20,000 took an id the pass had passed: not named
}

}  // namespace
}  // namespace gpucache
