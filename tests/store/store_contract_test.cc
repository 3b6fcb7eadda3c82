// The store contract, run against both media: MemoryStore (the reference) and FileStore.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "store/file_store.h"
#include "store/memory_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/store_factories.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

using test::FileFactory;
using test::MemoryFactory;

const Owner kOwner{1000, 1000};

// Reserve, set identity, write, commit: what a well-behaved engine does.
StatusCode CommitBlock(BlockStore& s, const CacheIdentity& id, const Bytes& payload) {
  BlockAddress a = AddressOf(id);
  StatusCode ns = s.CreateNamespace(a.tenant, a.ns, kOwner);
  if (ns != StatusCode::kOk && ns != StatusCode::kExists) return ns;
  auto r = s.Reserve(a, kOwner);
  if (!r.ok()) return r.status();
  if (auto st = s.SetIdentity(r.value(), EncodePhysicalKey(id)); st != StatusCode::kOk) return st;
  auto w = s.Write(r.value(), 0, payload);
  if (!w.ok()) return w.status();
  return s.Commit(r.value());
}

Bytes ReadAll(BlockReader& r) {
  Bytes out(r.info().size);
  auto n = r.Read(0, out);
  REQUIRE(n.ok());
  REQUIRE(n.value() == out.size());
  return out;
}

TEST_CASE_TEMPLATE("Store: commit then exact hit returns identical bytes", F, MemoryFactory,
                   FileFactory) {
  F f;
  auto s = f.Make();
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(200000);
  REQUIRE(CommitBlock(*s, id, payload) == StatusCode::kOk);

  LookupResult l = s->Lookup(id);
  CHECK(l.kind == LookupResult::Kind::kHit);
  CHECK(l.address == AddressOf(id));
  auto reader = s->Open(AddressOf(id));
  REQUIRE(reader.ok());
  CHECK(ReadAll(*reader.value()) == payload);
  CHECK(reader.value()->info().identity == id);
  CHECK(reader.value()->info().owner == kOwner);

  // Unaligned ranges come back verified and exact.
  Bytes mid(70000);
  auto n = reader.value()->Read(65000, mid);
  REQUIRE(n.ok());
  CHECK(std::equal(mid.begin(), mid.end(), payload.begin() + 65000));
  Bytes tail(100);
  CHECK(reader.value()->Read(payload.size() - 10, tail).value() == 10);
  CHECK(reader.value()->Read(payload.size(), tail).value() == 0);
}

TEST_CASE_TEMPLATE("Store: Stat tells the whole identity, StatAttributes and Probe only attributes",
                   F, MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  CacheIdentity id = SampleIdentity();
  REQUIRE(CommitBlock(*s, id, Payload(5000)) == StatusCode::kOk);
  auto full = s->Stat(AddressOf(id));
  REQUIRE(full.ok());
  CHECK(full->address == AddressOf(id));
  CHECK(full->identity == id);
  CHECK(full->canonical_identity == EncodePhysicalKey(id));
  CHECK(full->size == 5000);
  CHECK(full->owner == kOwner);
  CHECK(full->checksum == "xxh3-128:" + ComputeChecksums(Payload(5000)).digest_hex);
  CHECK(full->state == BlockState::kCommitted);
  for (auto attrs : {s->StatAttributes(AddressOf(id)), s->Probe(AddressOf(id))}) {
    REQUIRE(attrs.ok());
    CHECK(attrs->identity.chain.empty());
    CHECK(attrs->canonical_identity.empty());
    CHECK(attrs->checksum.empty());  // kept by the medium, not the index: Stat and Open read it
    BlockInfo expected = full.value();
    expected.identity = {};
    expected.canonical_identity.clear();
    CHECK(attrs->address == expected.address);
    CHECK(attrs->size == expected.size);
    CHECK(attrs->commit_epoch == expected.commit_epoch);
    CHECK(attrs->region_id == expected.region_id);
    CHECK(attrs->owner == expected.owner);
    CHECK(attrs->commit_time_ns == expected.commit_time_ns);
    CHECK(attrs->pinned == expected.pinned);
  }
  auto reader = s->Open(AddressOf(id));
  REQUIRE(reader.ok());
  CHECK(reader.value()->info().checksum == full->checksum);
  CHECK(reader.value()->info().identity == id);
  CHECK(s->Stat(AddressOf(SampleIdentity("acme", 3))).status() == StatusCode::kNotFound);
  CHECK(s->StatAttributes({"acme", AddressOf(id).ns, "not-a-block-name"}).status() ==
        StatusCode::kNotFound);
}

TEST_CASE_TEMPLATE("Store: a miss is a miss with a reason", F, MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  LookupResult l = s->Lookup(SampleIdentity());
  CHECK(l.kind == LookupResult::Kind::kMiss);
  CHECK(l.reason == MissReason::kAbsent);
  CHECK(s->Open(AddressOf(SampleIdentity())).status() == StatusCode::kNotFound);
}

TEST_CASE_TEMPLATE("Store: same logical key, other physical key is an incompatible miss", F,
                   MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  REQUIRE(CommitBlock(*s, SampleIdentity(), Payload(1000)) == StatusCode::kOk);
  CacheIdentity fp16 = SampleIdentity();
  fp16.kv_dtype = "fp16";
  LookupResult l = s->Lookup(fp16);
  CHECK(l.kind == LookupResult::Kind::kMiss);
  CHECK(l.reason == MissReason::kIncompatible);
}

TEST_CASE_TEMPLATE("Store: prefix hit on a strict-prefix chain, whole block, never longer", F,
                   MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  CacheIdentity half = SampleIdentity("acme", 8);  // 128 of 256 tokens
  REQUIRE(CommitBlock(*s, half, Payload(4096)) == StatusCode::kOk);

  LookupResult full = s->Lookup(SampleIdentity("acme", 16));
  CHECK(full.kind == LookupResult::Kind::kPrefixHit);
  CHECK(full.address == AddressOf(half));
  CHECK(full.valid_length == 128);

  // The stored block is longer than this request: not a hit.
  LookupResult quarter = s->Lookup(SampleIdentity("acme", 4));
  CHECK(quarter.kind == LookupResult::Kind::kMiss);

  // A byte-affecting difference kills the prefix hit.
  CacheIdentity other_shard = SampleIdentity("acme", 16);
  other_shard.tp_rank = 1;
  CHECK(s->Lookup(other_shard).kind == LookupResult::Kind::kMiss);

  // A different parent is a different prefix.
  CacheIdentity other_parent = SampleIdentity("acme", 16);
  other_parent.chain[0] = test::Hash(99);
  CHECK(s->Lookup(other_parent).kind == LookupResult::Kind::kMiss);

  // The longest stored prefix wins.
  CacheIdentity three_quarters = SampleIdentity("acme", 12);
  REQUIRE(CommitBlock(*s, three_quarters, Payload(4096)) == StatusCode::kOk);
  CHECK(s->Lookup(SampleIdentity("acme", 16)).address == AddressOf(three_quarters));
}

TEST_CASE_TEMPLATE("Store: tenants never see each other's blocks", F, MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  REQUIRE(CommitBlock(*s, SampleIdentity("acme", 8), Payload(100)) == StatusCode::kOk);
  CHECK(s->Lookup(SampleIdentity("globex", 8)).kind == LookupResult::Kind::kMiss);
  CHECK(s->Lookup(SampleIdentity("globex", 16)).kind == LookupResult::Kind::kMiss);  // no prefix hit
  CHECK(s->Lookup(SampleIdentity("acme", 16)).kind == LookupResult::Kind::kPrefixHit);
}

TEST_CASE_TEMPLATE("Store: single flight: a second reservation of one block is refused", F,
                   MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  BlockAddress a = AddressOf(SampleIdentity());
  REQUIRE(s->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kOk);
  auto first = s->Reserve(a, kOwner);
  REQUIRE(first.ok());
  CHECK(s->Reserve(a, kOwner).status() == StatusCode::kExists);
  REQUIRE(s->Abort(first.value()) == StatusCode::kOk);
  CHECK(s->Reserve(a, kOwner).ok());
}

TEST_CASE_TEMPLATE("Store: a committed block cannot be reserved again", F, MemoryFactory,
                   FileFactory) {
  F f;
  auto s = f.Make();
  REQUIRE(CommitBlock(*s, SampleIdentity(), Payload(10)) == StatusCode::kOk);
  CHECK(s->Reserve(AddressOf(SampleIdentity()), kOwner).status() == StatusCode::kExists);
}

TEST_CASE_TEMPLATE("Store: commit checks identity, path, size and writers", F, MemoryFactory,
                   FileFactory) {
  F f;
  StoreOptions o;
  o.limits.global.max_block_bytes = 1 << 20;
  auto s = f.Make(o);
  CacheIdentity id = SampleIdentity();
  BlockAddress a = AddressOf(id);
  REQUIRE(s->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kOk);
  auto r = s->Reserve(a, kOwner);
  REQUIRE(r.ok());
  ReservationId rid = r.value();
  REQUIRE(s->Write(rid, 0, Payload(100)).ok());
  CHECK(s->StatReservation(rid)->state == BlockState::kWriting);

  CHECK(s->Commit(rid) == StatusCode::kInvalidArgument);  // no identity
  Bytes garbage = {1, 2, 3};
  REQUIRE(s->SetIdentity(rid, garbage) == StatusCode::kOk);
  CHECK(s->Commit(rid) == StatusCode::kInvalidArgument);  // malformed
  CacheIdentity other = SampleIdentity("acme", 3);
  REQUIRE(s->SetIdentity(rid, EncodePhysicalKey(other)) == StatusCode::kOk);
  CHECK(s->Commit(rid) == StatusCode::kInvalidArgument);  // valid, but another path
  CHECK(s->Lookup(id).kind == LookupResult::Kind::kMiss);  // nothing was committed

  REQUIRE(s->SetIdentity(rid, EncodePhysicalKey(id)) == StatusCode::kOk);
  REQUIRE(s->OpenWriter(rid) == StatusCode::kOk);
  CHECK(s->Commit(rid) == StatusCode::kBusy);  // still open for writing
  s->CloseWriter(rid);
  CHECK(s->Write(rid, (1 << 20) - 10, Payload(11)).status() == StatusCode::kTooLarge);
  CHECK(s->Commit(rid) == StatusCode::kOk);
  CHECK(s->Lookup(id).kind == LookupResult::Kind::kHit);
  CHECK(s->Write(rid, 0, Payload(1)).status() == StatusCode::kNotFound);  // reservation is gone
}

TEST_CASE_TEMPLATE("Store: an empty block is refused", F, MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  CHECK(CommitBlock(*s, SampleIdentity(), Bytes{}) == StatusCode::kInvalidArgument);
}

TEST_CASE_TEMPLATE("Store: abort leaves nothing behind", F, MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  BlockAddress a = AddressOf(SampleIdentity());
  REQUIRE(s->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kOk);
  auto r = s->Reserve(a, kOwner);
  REQUIRE(s->Write(r.value(), 0, Payload(10)).ok());
  CHECK(s->ListEntries(a.tenant, a.ns) == std::vector<std::string>{a.block + ".part"});
  REQUIRE(s->Abort(r.value()) == StatusCode::kOk);
  CHECK(s->ListEntries(a.tenant, a.ns).empty());
  CHECK(s->Stats().tenants["acme"].usage.reservations == 0);
  CHECK(s->RemoveNamespace(a.tenant, a.ns) == StatusCode::kOk);
}

TEST_CASE_TEMPLATE("Store: a namespace's change time moves when a fill or a block comes or goes", F,
                   MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  BlockAddress a = AddressOf(SampleIdentity());
  auto changed = [&] {
    Result<NamespaceInfo> n = s->StatNamespace(a.tenant, a.ns);
    REQUIRE(n.ok());
    CHECK(n->owner == kOwner);
    return n->change_time_ns;
  };
  // A clock tick between steps: each step must move the time on, not only keep it.
  auto tick = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  REQUIRE(s->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kOk);
  uint64_t made = changed();
  CHECK(made != 0);
  tick();
  auto r = s->Reserve(a, kOwner);
  REQUIRE(r.ok());
  uint64_t reserved = changed();
  CHECK(reserved > made);
  tick();
  REQUIRE(s->Abort(r.value()) == StatusCode::kOk);
  uint64_t aborted = changed();
  CHECK(aborted > reserved);
  tick();
  REQUIRE(CommitBlock(*s, SampleIdentity(), Payload(10)) == StatusCode::kOk);
  uint64_t committed = changed();
  CHECK(committed > aborted);
  CHECK(committed >= s->StatAttributes(a)->commit_time_ns);
  tick();
  REQUIRE(s->Invalidate(a) == StatusCode::kOk);
  CHECK(changed() > committed);
  // Reads change nothing.
  uint64_t before = changed();
  tick();
  CHECK(s->Lookup(SampleIdentity()).kind == LookupResult::Kind::kMiss);
  CHECK(changed() == before);
}

TEST_CASE_TEMPLATE("Store: namespace with blocks cannot be removed", F, MemoryFactory,
                   FileFactory) {
  F f;
  auto s = f.Make();
  REQUIRE(CommitBlock(*s, SampleIdentity(), Payload(10)) == StatusCode::kOk);
  BlockAddress a = AddressOf(SampleIdentity());
  CHECK(s->RemoveNamespace(a.tenant, a.ns) == StatusCode::kNotEmpty);
  CHECK(s->ListNamespaces("acme") == std::vector<std::string>{a.ns});
  CHECK(s->CreateNamespace("acme", "bad name", kOwner) == StatusCode::kInvalidArgument);
}

TEST_CASE_TEMPLATE("Store: invalidate removes the block", F, MemoryFactory, FileFactory) {
  F f;
  auto s = f.Make();
  REQUIRE(CommitBlock(*s, SampleIdentity(), Payload(10)) == StatusCode::kOk);
  REQUIRE(s->Invalidate(AddressOf(SampleIdentity())) == StatusCode::kOk);
  CHECK(s->Lookup(SampleIdentity()).kind == LookupResult::Kind::kMiss);
  CHECK(s->Stats().tenants["acme"].usage.blocks == 0);
  CHECK(s->Invalidate(AddressOf(SampleIdentity())) == StatusCode::kNotFound);
}

TEST_CASE_TEMPLATE("Store: counters follow commits, hits and misses", F, MemoryFactory,
                   FileFactory) {
  F f;
  auto s = f.Make();
  REQUIRE(CommitBlock(*s, SampleIdentity("acme", 8), Payload(1000)) == StatusCode::kOk);
  s->Lookup(SampleIdentity("acme", 8));
  s->Lookup(SampleIdentity("acme", 16));
  s->Probe(AddressOf(SampleIdentity("acme", 3)));
  TenantCounters c = s->Stats().tenants["acme"];
  CHECK(c.usage.blocks == 1);
  CHECK(c.usage.bytes == 1000);
  CHECK(c.commits == 1);
  CHECK(c.hits == 1);
  CHECK(c.prefix_hits == 1);
  CHECK(c.misses == 1);
}

TEST_CASE("Store: a corrupted byte in memory is never served, then it is a miss") {
  MemoryStore s;
  CacheIdentity id = SampleIdentity();
  REQUIRE(CommitBlock(s, id, Payload(200000)) == StatusCode::kOk);
  std::vector<BlockAddress> removed;
  s.SetRemovalObserver([&](const BlockAddress& a, RemovalReason why, std::string_view detail) {
    CHECK(why == RemovalReason::kCorrupt);
    CHECK(detail == "chunk 2 (bytes 131072-196607)");  // 150000 is in the third 64 KiB chunk
    removed.push_back(a);
  });
  auto reader = s.Open(AddressOf(id));
  REQUIRE(reader.ok());
  REQUIRE(s.TEST_CorruptByte(AddressOf(id), 150000));
  Bytes first(1000);
  CHECK(reader.value()->Read(0, first).ok());  // chunk 0 is intact
  Bytes out(1000);
  CHECK(reader.value()->Read(149500, out).status() == StatusCode::kChecksumMismatch);
  CHECK(s.Lookup(id).kind == LookupResult::Kind::kMiss);
  CHECK(s.Stats().tenants["acme"].checksum_failures == 1);
  CHECK(removed == std::vector<BlockAddress>{AddressOf(id)});
}

// The cold tier withdraws the cold copy of a block the engine invalidated: it hears of each
// invalidation, with the checksum of the payload that went, and of nothing else.
TEST_CASE("Store: an invalidation is told to the invalidation observer with its payload's checksum") {
  MemoryStore s;
  CacheIdentity id = SampleIdentity();
  REQUIRE(CommitBlock(s, id, Payload(5000)) == StatusCode::kOk);
  const std::string checksum = s.Stat(AddressOf(id)).value().checksum;
  std::vector<std::pair<BlockAddress, std::string>> told;
  s.SetInvalidationObserver([&](const BlockAddress& a, const std::string& c) { told.push_back({a, c}); });
  CacheIdentity other = SampleIdentity();
  other.chain[1] = test::Hash(77);
  REQUIRE(CommitBlock(s, other, Payload(100)) == StatusCode::kOk);
  REQUIRE(s.Evict(AddressOf(other)) == StatusCode::kOk);  // an eviction is not an invalidation
  CHECK(s.Invalidate(AddressOf(id)) == StatusCode::kOk);
  CHECK(s.Invalidate(AddressOf(id)) == StatusCode::kNotFound);
  REQUIRE(told.size() == 1);
  CHECK(told[0].first == AddressOf(id));
  CHECK(told[0].second == checksum);
  CHECK_FALSE(checksum.empty());
}

}  // namespace
}  // namespace gpucache
