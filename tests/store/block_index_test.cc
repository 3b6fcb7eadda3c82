// BlockIndex alone: records found by address, policy key, logical key and chain links.
#include "store/block_index.h"

#include <doctest/doctest.h>

#include <set>
#include <vector>

#include "store/indexed_store.h"
#include "tests/store/store_parts_test.h"

namespace gpucache {
namespace {

using test::Block;
using test::BlockNo;
using test::FullKeys;
using test::RecordOf;

const Owner kOwner{1000, 1000};

TEST_CASE("BlockIndex: insert, find by address, remove, reuse ids") {
  BlockIndex index;
  std::optional<BlockIndex::Id> a = index.Insert(Block(BlockNo("acme", 1), RecordOf(10), FullKeys(), kOwner));
  std::optional<BlockIndex::Id> b = index.Insert(Block(BlockNo("acme", 2), RecordOf(20), FullKeys(), kOwner));
  REQUIRE(a);
  REQUIRE(b);
  CHECK_FALSE(index.Insert(Block(BlockNo("acme", 1), RecordOf(30), FullKeys(), kOwner)));  // already indexed
  CHECK_FALSE(index.Insert(Block(BlockAddress{"acme", "ns", "not-hex"}, RecordOf(1), FullKeys(), kOwner)));
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
  std::optional<BlockIndex::Id> c = index.Insert(Block(BlockNo("acme", 3), RecordOf(5), FullKeys(), kOwner));
  CHECK(c == a);  // a freed id is reused
  CHECK(index.Find(BlockNo("acme", 3)) == c);
}

TEST_CASE("BlockIndex: namespaces are interned, listed in order and keep their blocks' ids") {
  BlockIndex index;
  NamespaceTable& names = index.namespaces();
  names.Add("acme", "zeta", Owner{1, 1});
  uint32_t alpha = names.Add("acme", "alpha", Owner{2, 2});
  CHECK(names.Add("acme", "alpha", Owner{3, 3}) == alpha);  // the first owner stays
  CHECK(names.OwnerOf(alpha) == Owner{2, 2});
  CHECK(names.NamesOf("acme") == std::vector<std::string>{"alpha", "zeta"});
  CHECK(names.NamesOf("globex").empty());
  auto id = index.Insert(Block(BlockNo("acme", 1), RecordOf(1), FullKeys(), kOwner));
  uint32_t ns = *names.Find("acme", "ns");
  CHECK(names.BlocksIn(ns) == 1);
  std::vector<BlockIndex::Id> listed;
  index.ForEach([&](BlockIndex::Id b) {
    if (index.NamespaceOf(b) == ns) listed.push_back(b);
  });
  CHECK(listed == std::vector<BlockIndex::Id>{*id});
  CHECK(names.TenantOf(ns) == "acme");
  index.Remove(*id);
  CHECK(names.BlocksIn(ns) == 0);
  names.Remove(ns);
  CHECK_FALSE(names.Find("acme", "ns"));
}

TEST_CASE("BlockIndex: a namespace takes its first block's capacity and its latest change time") {
  BlockIndex index;
  const NamespaceTable& names = index.namespaces();
  IndexKeys keys = FullKeys();
  keys.block_capacity = 64;
  IndexedBlock at_200 = RecordOf(1);
  at_200.commit_time_ns = 200;
  auto a = index.Insert(Block(BlockNo("acme", 1), at_200, keys, kOwner));
  REQUIRE(a);
  uint32_t ns = *names.Find("acme", "ns");
  CHECK(names.BlockCapacityOf(ns) == 64);
  CHECK(index.Read(*a).keys.block_capacity == 64);
  CHECK(names.ChangedAt(ns) == 200);
  IndexedBlock at_100 = RecordOf(1);
  at_100.commit_time_ns = 100;  // committed earlier (a start restores blocks in any order)
  REQUIRE(index.Insert(Block(BlockNo("acme", 2), at_100, keys, kOwner)));
  CHECK(names.ChangedAt(ns) == 200);  // never goes back
  index.namespaces().Touch(ns, 300);
  CHECK(names.ChangedAt(ns) == 300);
  CHECK(names.BlocksIn(ns) == 2);
}

TEST_CASE("BlockIndex: logical keys and chain links find their blocks") {
  BlockIndex index;
  IndexKeys parent = FullKeys();
  parent.parent = 11;
  parent.tail = 22;
  parent.logical = 99;
  IndexKeys child = FullKeys();
  child.parent = 11;  // the same chain[0]: a prefix-hit candidate of the parent's
  child.tail = 33;
  auto p = index.Insert(Block(BlockNo("acme", 1), RecordOf(1), parent, kOwner));
  auto c = index.Insert(Block(BlockNo("acme", 2), RecordOf(1), child, kOwner));
  uint32_t ns = *index.namespaces().Find("acme", "ns");
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

// The record keeps IndexKeys but the identity digest (the address stands for it) and the
// block capacity (its namespace's), and the owner as a slot of a table of distinct owners.
TEST_CASE("BlockIndex: a block's keys and owner come back as inserted") {
  BlockIndex index;
  IndexKeys keys;
  keys.logical = 1;
  keys.parent = 2;
  keys.tail = 3;
  keys.prefix = 4;
  keys.valid_length = 100;
  keys.block_capacity = 256;
  keys.chain_length = 7;
  IndexedBlock record = RecordOf(10, 77);
  record.commit_time_ns = 123456789012345;
  record.commit_epoch = 9;
  record.pinned = true;
  auto a = index.Insert(Block(BlockNo("acme", 1), record, keys, Owner{5, 6}));
  IndexKeys full = FullKeys();
  auto b = index.Insert(Block(BlockNo("acme", 2), RecordOf(20), full, Owner{7, 8}));
  auto c = index.Insert(Block(BlockNo("acme", 3), RecordOf(30), full, Owner{5, 6}));
  REQUIRE((a && b && c));
  CHECK(index.Read(*a).keys == keys);
  CHECK(index.Read(*b).keys == full);
  CHECK(index.BlockOwner(*a) == Owner{5, 6});
  CHECK(index.BlockOwner(*b) == Owner{7, 8});
  CHECK(index.BlockOwner(*c) == Owner{5, 6});
  CHECK(index.at(*a).context == index.at(*c).context);  // one slot for one owner and namespace
  // The namespace's owner is its first block's.
  CHECK(index.namespaces().OwnerOf(*index.namespaces().Find("acme", "ns")) == Owner{5, 6});
  const BlockIndex::Record& r = index.at(*a);
  CHECK(r.size == 10);
  CHECK(r.region_id == 77);
  CHECK(r.commit_time_ns == 123456789012345);
  CHECK(index.Read(*a).commit_epoch == 9);
  CHECK(r.pinned);
  index.Remove(*a);
  index.Remove(*b);
  index.Remove(*c);
  auto d = index.Insert(Block(BlockNo("acme", 4), RecordOf(40), full, Owner{7, 8}));
  REQUIRE(d);
  CHECK(index.BlockOwner(*d) == Owner{7, 8});
  CHECK(index.Read(*d).keys == full);
}

// The record keeps no commit epoch of its own: a region id carries its epoch in its high 32
// bits. A block whose epoch is another one (a file of another writer) keeps it beside.
TEST_CASE("BlockIndex: commit epochs come back exactly, the region's or another") {
  BlockIndex index;
  IndexedBlock usual = RecordOf(10, (uint64_t{7} << 32) | 5);
  usual.commit_epoch = 7;
  IndexedBlock odd = RecordOf(10, (uint64_t{7} << 32) | 6);
  odd.commit_epoch = (uint64_t{1} << 40) + 3;  // wider than the region's half, even
  auto a = index.Insert(Block(BlockNo("acme", 1), usual, FullKeys(), kOwner));
  auto b = index.Insert(Block(BlockNo("acme", 2), odd, FullKeys(), kOwner));
  REQUIRE((a && b));
  CHECK(index.Read(*a).commit_epoch == 7);
  CHECK(index.Read(*b).commit_epoch == (uint64_t{1} << 40) + 3);
  CHECK_FALSE(bool(index.at(*a).epoch_apart));
  index.Remove(*b);
  auto c = index.Insert(Block(BlockNo("acme", 3), RecordOf(1, uint64_t{9} << 32), FullKeys(), kOwner));
  REQUIRE(c == b);  // the id comes back: what the odd block kept beside it does not
  CHECK(index.Read(*c).commit_epoch == 0);
}

TEST_CASE("BlockIndex: open readers are counted per block and leave with it") {
  BlockIndex index;
  auto a = index.Insert(Block(BlockNo("acme", 1), RecordOf(1), FullKeys(), kOwner));
  auto b = index.Insert(Block(BlockNo("acme", 2), RecordOf(1), FullKeys(), kOwner));
  REQUIRE((a && b));
  index.ReaderOpened(*a);
  index.ReaderOpened(*a);
  CHECK(index.OpenReaders(*a) == 2);
  CHECK(index.OpenReaders(*b) == 0);
  index.ReaderClosed(*a);
  CHECK(index.OpenReaders(*a) == 1);
  index.ReaderClosed(*b);  // none open: nothing to give back
  CHECK(index.OpenReaders(*b) == 0);
  index.Remove(*a);
  auto c = index.Insert(Block(BlockNo("acme", 3), RecordOf(1), FullKeys(), kOwner));
  REQUIRE(c == a);
  CHECK(index.OpenReaders(*c) == 0);  // the reused id starts closed
}

TEST_CASE("BlockIndex: a leaving block is EVICTING, flags and lengths keep their values") {
  BlockIndex index;
  IndexKeys keys = FullKeys();
  keys.valid_length = kMaxBlockTokens;
  keys.block_capacity = kMaxBlockTokens;
  keys.chain_length = kMaxChainLength;
  IndexedBlock pinned = RecordOf(1);
  pinned.pinned = true;
  auto a = index.Insert(Block(BlockNo("acme", 1), pinned, keys, kOwner));
  REQUIRE(a);
  CHECK(index.Read(*a).keys == keys);
  CHECK(bool(index.at(*a).pinned));
  CHECK(index.at(*a).state() == BlockState::kCommitted);
  index.MarkEvicting(*a);
  CHECK(index.at(*a).state() == BlockState::kEvicting);
  CHECK(index.Remove(*a).state() == BlockState::kEvicting);
  // No identity holds more tokens: such keys are refused rather than cut to the record's bits.
  keys.valid_length = kMaxBlockTokens + 1;
  CHECK_FALSE(index.Insert(Block(BlockNo("acme", 2), RecordOf(1), keys, kOwner)));
  CHECK(index.size() == 0);
}

// Namespace, medium state and owner are one slot of a table of the distinct triples; a
// namespace counts its blocks and is listed by a pass over the records.
TEST_CASE("BlockIndex: namespaces, states and owners shared by blocks are held once") {
  BlockIndex index;
  auto a = index.Insert(Block(BlockAddress{"acme", "one", BlockNo("acme", 1).block}, RecordOf(1), FullKeys(), kOwner));
  auto b = index.Insert(Block(BlockAddress{"acme", "one", BlockNo("acme", 2).block}, RecordOf(1), FullKeys(), kOwner));
  auto c = index.Insert(Block(BlockAddress{"acme", "two", BlockNo("acme", 1).block}, RecordOf(1), FullKeys(), kOwner));
  auto d = index.Insert(Block(BlockAddress{"acme", "two", BlockNo("acme", 2).block}, RecordOf(1), FullKeys(), Owner{1, 2}));
  REQUIRE((a && b && c && d));
  CHECK(index.at(*a).context == index.at(*b).context);
  CHECK(index.at(*a).context != index.at(*c).context);  // another namespace
  CHECK(index.at(*c).context != index.at(*d).context);  // another owner
  uint32_t one = *index.namespaces().Find("acme", "one");
  uint32_t two = *index.namespaces().Find("acme", "two");
  CHECK(index.NamespaceOf(*a) == one);
  CHECK(index.NamespaceOf(*d) == two);
  CHECK(index.BlockOwner(*d) == Owner{1, 2});
  // The same name in two namespaces: two blocks.
  CHECK(index.Find(BlockAddress{"acme", "two", BlockNo("acme", 1).block}) == c);
  CHECK(index.Find(BlockAddress{"acme", "one", BlockNo("acme", 1).block}) == a);
  index.Remove(*b);
  CHECK(index.namespaces().BlocksIn(one) == 1);
  CHECK(index.namespaces().BlocksIn(two) == 2);
  std::vector<BlockIndex::Id> in_two, all;
  index.ForEach([&](BlockIndex::Id id) {
    if (index.NamespaceOf(id) == two) in_two.push_back(id);
  });
  index.ForEach([&](BlockIndex::Id id) { all.push_back(id); });
  CHECK(in_two == std::vector<BlockIndex::Id>{*c, *d});
  CHECK(all == std::vector<BlockIndex::Id>{*a, *c, *d});  // the removed one is skipped
  index.Remove(*d);
  auto e = index.Insert(Block(BlockAddress{"acme", "one", BlockNo("acme", 3).block}, RecordOf(1), FullKeys(), Owner{1, 2}));
  REQUIRE(e);
  CHECK(index.NamespaceOf(*e) == one);  // a freed slot is not the old triple
  CHECK(index.BlockOwner(*e) == Owner{1, 2});
  CHECK(index.BlockOwner(*a) == kOwner);
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

// Many ids under one key (a parent's children, blocks sharing a chain digest) must not become a
// cluster of slots that every probe landing in it walks: 100,000 blocks sharing one chain tail
// made a start spend 6.5 s in the tail table (docs/performance.md, the whole run of 2026-12-02).
TEST_CASE("IdTable: ids under equal keys stay out of the probe sequences and are all found") {
  constexpr uint64_t kShared = 0x5eed;
  constexpr IdTable::Id kEqual = 20000, kDistinct = 20000;
  std::vector<uint64_t> hash_of(kEqual + kDistinct);
  for (IdTable::Id id = 0; id < hash_of.size(); ++id) {
    hash_of[id] = id < kEqual ? kShared : 0x9E3779B97F4A7C15ull * (id + 1);
  }
  auto hash = [&](IdTable::Id id) { return hash_of[id]; };
  IdTable t;
  for (IdTable::Id id = 0; id < hash_of.size(); ++id) {
    t.Insert(id, hash_of[id], hash);
    if (id % 997 == 0) CHECK(t.LongestRun() < 200);  // was the number of equal ids so far
  }
  CHECK(t.size() == hash_of.size());
  CHECK(t.LongestRun() < 200);
  auto under_shared = [&] {
    std::set<IdTable::Id> seen;
    t.ForEachCandidate(kShared, [&](IdTable::Id id) {
      if (hash_of[id] == kShared) seen.insert(id);
    });
    return seen;
  };
  CHECK(under_shared().size() == kEqual);
  for (IdTable::Id id = kEqual; id < hash_of.size(); id += 101) {
    CHECK(t.Find(hash_of[id], [&](IdTable::Id c) { return c == id; }) == id);
  }
  // Every other equal id and every other distinct one goes, the first inserted (in the slots)
  // among them; the rest are all still found.
  for (IdTable::Id id = 0; id < hash_of.size(); id += 2) CHECK(t.Erase(id, hash_of[id]));
  CHECK_FALSE(t.Erase(0, kShared));  // already gone
  CHECK(t.size() == hash_of.size() / 2);
  std::set<IdTable::Id> left = under_shared();
  CHECK(left.size() == kEqual / 2);
  CHECK(left.count(1) == 1);
  CHECK(left.count(0) == 0);
  for (IdTable::Id id = 1; id < kEqual; id += 2) {
    CHECK(t.Find(kShared, [&](IdTable::Id c) { return c == id; }) == id);
  }
  for (IdTable::Id id = kEqual + 1; id < hash_of.size(); id += 2) {
    CHECK(t.Find(hash_of[id], [&](IdTable::Id c) { return c == id; }) == id);
    CHECK_FALSE(t.Find(hash_of[id - 1], [&](IdTable::Id c) { return c == id - 1; }));
  }
  // A rebuild (growing past 80 %) keeps them apart and all findable.
  hash_of.resize(hash_of.size() + 40000);
  for (IdTable::Id id = kEqual + kDistinct; id < hash_of.size(); ++id) {
    hash_of[id] = id % 2 == 0 ? kShared : 0x9E3779B97F4A7C15ull * (id + 1);
    t.Insert(id, hash_of[id], hash);
  }
  CHECK(t.LongestRun() < 200);
  CHECK(under_shared().size() == kEqual / 2 + 20000);
}

// A probe passes the slots of other keys on its way (about 8 for an absent key at 75 %): each
// look at one was a look at its record, a cache miss once the records outgrow the caches, and
// 1,000,000 blocks took 13 times as long to index at a start as 100,000. The slot's bits of the
// hash let a probe pass them unread.
TEST_CASE("IdTable: a probe looks at the records of its own hash only, nearly always") {
  constexpr IdTable::Id kIds = 100000;
  std::vector<uint64_t> hash_of(kIds);
  for (IdTable::Id id = 0; id < kIds; ++id) hash_of[id] = 0x9E3779B97F4A7C15ull * (id + 1);
  size_t looked = 0;
  auto hash = [&](IdTable::Id id) {
    looked++;
    return hash_of[id];
  };
  IdTable t;  // not keys_unique: every Insert walks its run for ids of the same hash
  t.Reserve(kIds, hash);
  looked = 0;
  for (IdTable::Id id = 0; id < kIds; ++id) t.Insert(id, hash_of[id], hash);
  CHECK(looked < kIds / 4);  // was about 3 per insert
  looked = 0;
  for (uint64_t k = 1; k <= kIds; ++k) {  // absent keys
    CHECK_FALSE(t.Find(k * 0xC2B2AE3D27D4EB4Full, [&](IdTable::Id id) {
      looked++;
      return hash_of[id] == k * 0xC2B2AE3D27D4EB4Full;
    }));
  }
  CHECK(looked < kIds / 4);  // was about 8 per probe
  for (IdTable::Id id = 0; id < kIds; id += 7) {
    CHECK(t.Find(hash_of[id], [&](IdTable::Id c) { return c == id; }) == id);
  }
  CHECK(IdTable::kMaxIds == (1u << 27) - 2);
}

}  // namespace
}  // namespace gpucache
