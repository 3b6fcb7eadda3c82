// BlockIndex alone: records found by address, policy key, logical key and chain links.
#include "store/block_index.h"

#include <doctest/doctest.h>

#include "store/indexed_store.h"
#include "tests/store/store_parts_test.h"

namespace gpucache {
namespace {

using test::BlockNo;
using test::RecordOf;

TEST_CASE("BlockIndex: insert, find by address, remove, reuse ids") {
  BlockIndex index;
  std::optional<BlockIndex::Id> a = index.Insert(BlockNo("acme", 1), RecordOf(10));
  std::optional<BlockIndex::Id> b = index.Insert(BlockNo("acme", 2), RecordOf(20));
  REQUIRE(a);
  REQUIRE(b);
  CHECK_FALSE(index.Insert(BlockNo("acme", 1), RecordOf(30)));  // already indexed
  CHECK_FALSE(index.Insert(BlockAddress{"acme", "ns", "not-hex"}, RecordOf(1)));
  CHECK(index.size() == 2);
  CHECK(index.Find(BlockNo("acme", 1)) == a);
  CHECK(index.at(*a).size == 10);
  CHECK(index.AddressOf(*b) == BlockNo("acme", 2));
  CHECK_FALSE(index.Find(BlockNo("globex", 1)));

  BlockIndex::Record gone = index.Remove(*a);
  CHECK(gone.size == 10);
  CHECK_FALSE(index.Find(BlockNo("acme", 1)));
  CHECK(index.Find(BlockNo("acme", 2)) == b);  // the others keep their ids
  CHECK(index.size() == 1);
  std::optional<BlockIndex::Id> c = index.Insert(BlockNo("acme", 3), RecordOf(5));
  CHECK(c == a);  // a freed id is reused
  CHECK(index.Find(BlockNo("acme", 3)) == c);
}

TEST_CASE("BlockIndex: namespaces are interned, listed in order and keep their blocks' ids") {
  BlockIndex index;
  index.AddNamespace("acme", "zeta", Owner{1, 1});
  uint32_t alpha = index.AddNamespace("acme", "alpha", Owner{2, 2});
  CHECK(index.AddNamespace("acme", "alpha", Owner{3, 3}) == alpha);  // the first owner stays
  CHECK(index.OwnerOf(alpha) == Owner{2, 2});
  CHECK(index.NamespacesOf("acme") == std::vector<std::string>{"alpha", "zeta"});
  CHECK(index.NamespacesOf("globex").empty());
  auto id = index.Insert(BlockNo("acme", 1), RecordOf(1));
  uint32_t ns = *index.FindNamespace("acme", "ns");
  CHECK(index.BlocksIn(ns) == 1);
  CHECK(index.BlockIds(ns) == std::vector<BlockIndex::Id>{*id});
  CHECK(index.TenantOf(ns) == "acme");
  index.Remove(*id);
  index.RemoveNamespace(ns);
  CHECK_FALSE(index.FindNamespace("acme", "ns"));
}

TEST_CASE("BlockIndex: logical keys and chain links find their blocks") {
  BlockIndex index;
  BlockIndex::Record parent = RecordOf(1);
  parent.keys.parent = 11;
  parent.keys.tail = 22;
  parent.keys.logical = 99;
  BlockIndex::Record child = RecordOf(1);
  child.keys.parent = 11;  // the same chain[0]: a prefix-hit candidate of the parent's
  child.keys.tail = 33;
  auto p = index.Insert(BlockNo("acme", 1), parent);
  auto c = index.Insert(BlockNo("acme", 2), child);
  uint32_t ns = *index.FindNamespace("acme", "ns");
  CHECK(index.HasLogical(99));
  CHECK_FALSE(index.HasLogical(98));
  CHECK(index.ByTail(ns, 22) == p);
  CHECK_FALSE(index.ByTail(ns, 11));
  std::vector<BlockIndex::Id> with_parent;
  index.ForEachWithParent(ns, 11, [&](BlockIndex::Id id) { with_parent.push_back(id); });
  std::sort(with_parent.begin(), with_parent.end());
  CHECK(with_parent == std::vector<BlockIndex::Id>{*p, *c});
  index.Remove(*p);
  CHECK_FALSE(index.HasLogical(99));
  CHECK_FALSE(index.ByTail(ns, 22));
}

}  // namespace
}  // namespace gpucache
