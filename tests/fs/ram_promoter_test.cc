// RamPromoter (fs/ram_promoter.h): the background copy into the RAM tier keeps only copies of
// blocks that are still there when the copy is kept.
#include <doctest/doctest.h>
#include <fcntl.h>

#include <chrono>
#include <memory>
#include <thread>

#include "fs/ram_promoter.h"
#include "store/memory_store.h"
#include "store/ram_tier.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

// A store whose block leaves just after the promoter opened it for its copy, as an eviction or
// an unlink would, and tells the tier so as the filesystem does (Filesystem::BlockLeft): the
// tier has no copy in flight yet, so that Forget finds nothing to drop.
class LeavesWhileOpened final : public IndexedStore {
 public:
  LeavesWhileOpened() : IndexedStore({}, std::make_unique<MemoryMedium>()) {}
  Result<std::shared_ptr<BlockReader>> OpenForCopy(const BlockAddress& address) override {
    Result<std::shared_ptr<BlockReader>> reader = IndexedStore::OpenForCopy(address);
    if (tier && reader.ok()) {
      REQUIRE(Invalidate(address) == StatusCode::kOk);
      tier->Forget(address);
    }
    return reader;
  }
  RamTier* tier = nullptr;
};

void Commit(BlockStore& s, const CacheIdentity& id, const Bytes& payload) {
  BlockAddress a = AddressOf(id);
  StatusCode ns = s.CreateNamespace(a.tenant, a.ns, kOwner);
  REQUIRE((ns == StatusCode::kOk || ns == StatusCode::kExists));
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
  REQUIRE(s.Write(r.value(), 0, payload).ok());
  REQUIRE(s.Commit(r.value()) == StatusCode::kOk);
}

// Runs the promoter over `address` and waits for the worker to be done with it.
void PromoteAndWait(BlockStore& store, RamTier& tier, const BlockAddress& address) {
  RamPromoter promoter(store, tier);
  promoter.Start();
  REQUIRE(promoter.Enqueue(address, std::nullopt));
  for (int i = 0; i < 5000 && promoter.Pending() > 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(promoter.Pending() == 0);
  promoter.Stop();
}

Fd OpenDir(const std::string& path) { return Fd(::open(path.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC)); }

TEST_CASE("RamPromoter: a block still there is copied into the tier") {
  test::TempDir dir;
  MemoryStore store;
  RamTier tier(OpenDir(dir.path()), 1 << 20);
  CacheIdentity id = SampleIdentity("acme");
  Commit(store, id, Payload(10000));
  PromoteAndWait(store, tier, AddressOf(id));
  CHECK(tier.Stats().copies == 1);
  CHECK(tier.Find(AddressOf(id), store.StatAttributes(AddressOf(id))->region_id) != nullptr);
}

TEST_CASE("RamPromoter: a block that leaves while it is opened for the copy is not kept") {
  test::TempDir dir;
  LeavesWhileOpened store;
  RamTier tier(OpenDir(dir.path()), 1 << 20);
  CacheIdentity id = SampleIdentity("acme");
  Commit(store, id, Payload(10000));
  store.tier = &tier;
  PromoteAndWait(store, tier, AddressOf(id));
  CHECK(tier.Stats().copies == 0);
  CHECK(tier.Stats().bytes_held == 0);  // no budget held by a copy nothing can find
}

TEST_CASE("RamTier: a Forget of one region leaves the copy of another at the same address") {
  test::TempDir dir;
  MemoryStore store;
  RamTier tier(OpenDir(dir.path()), 1 << 20);
  CacheIdentity id = SampleIdentity("acme");
  Commit(store, id, Payload(10000));
  PromoteAndWait(store, tier, AddressOf(id));
  uint64_t region = store.StatAttributes(AddressOf(id))->region_id;
  tier.Forget(AddressOf(id), region + 1);
  CHECK(tier.Find(AddressOf(id), region) != nullptr);
  tier.Forget(AddressOf(id), region);
  CHECK(tier.Find(AddressOf(id), region) == nullptr);
}

}  // namespace
}  // namespace gpucache
