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
#include "tests/support/commit_block.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

// A store whose block leaves just after the promoter opened it for its copy, as an eviction or
// an unlink would, and tells the tier so as the filesystem does (Filesystem::BlockLeft): the
// tier has no copy in flight yet, so that Forget finds nothing to drop.
class LeavesWhileOpened final : public IndexedStore {
 public:
  explicit LeavesWhileOpened(StoreOptions options = {})
      : IndexedStore(std::move(options), std::make_unique<MemoryMedium>()) {}
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

// A store of type `Store` holding one committed block, and a tier of 1 MiB beside it.
template <typename Store>
struct PromoterHarness {
  PromoterHarness() : tier(Fd(::open(dir.path().c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC)), 1 << 20) {
    test::CommitBlock(store, id, test::Payload(10000), Owner{1000, 1000});
  }
  // Runs the promoter over the block and waits for the worker to be done with it.
  void PromoteAndWait() {
    RamPromoter promoter(store, tier);
    promoter.Start();
    REQUIRE(promoter.Enqueue(address, std::nullopt));
    for (int i = 0; i < 5000 && promoter.Pending() > 0; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(promoter.Pending() == 0);
    promoter.Stop();
  }
  uint64_t Region() { return store.StatAttributes(address)->region_id; }

  test::TempDir dir;
  Store store;
  RamTier tier;
  const CacheIdentity id = test::SampleIdentity("acme");
  const BlockAddress address = AddressOf(id);
};

TEST_CASE("RamPromoter: a block still there is copied into the tier") {
  PromoterHarness<MemoryStore> h;
  h.PromoteAndWait();
  CHECK(h.tier.Stats().copies == 1);
  CHECK(h.tier.Find(h.address, h.Region()) != nullptr);
}

TEST_CASE("RamPromoter: a block that leaves while it is opened for the copy is not kept") {
  PromoterHarness<LeavesWhileOpened> h;
  h.store.tier = &h.tier;
  h.PromoteAndWait();
  CHECK(h.tier.Stats().copies == 0);
  CHECK(h.tier.Stats().bytes_held == 0);  // no budget held by a copy nothing can find
}

TEST_CASE("RamTier: a Forget of one region leaves the copy of another at the same address") {
  PromoterHarness<MemoryStore> h;
  h.PromoteAndWait();
  uint64_t region = h.Region();
  h.tier.Forget(h.address, region + 1);
  CHECK(h.tier.Find(h.address, region) != nullptr);
  h.tier.Forget(h.address, region);
  CHECK(h.tier.Find(h.address, region) == nullptr);
}

}  // namespace
}  // namespace gpucache
