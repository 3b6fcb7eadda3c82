// RamPromoter (fs/ram_promoter.h): the background copy into the RAM tier keeps only copies of
// blocks that are still there when the copy is kept.
#include <doctest/doctest.h>
#include <fcntl.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
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

// A store whose first copy waits until the test lets it go: the worker is busy while the test
// asks for more copies, as it is while a burst of reads ends.
class FirstCopyWaits final : public IndexedStore {
 public:
  FirstCopyWaits() : IndexedStore({}, std::make_unique<MemoryMedium>()) {}
  Result<std::shared_ptr<BlockReader>> OpenForCopy(const BlockAddress& address) override {
    if (!waited_) {
      waited_ = true;
      started.set_value();
      go.get_future().wait();
    }
    return IndexedStore::OpenForCopy(address);
  }
  std::promise<void> started, go;

 private:
  bool waited_ = false;  // the worker's thread only
};

BlockAddress Nth(int i) { return {"acme", "ns", "block" + std::to_string(i)}; }

void WaitUntilIdle(const RamPromoter& promoter) {
  for (int i = 0; i < 5000 && promoter.Pending() > 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(promoter.Pending() == 0);
}

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
    REQUIRE(promoter.Enqueue(address, std::nullopt, 10000));
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

// The queue held 16 blocks: an engine's load of a 40-block prefix left 24 of them uncopied,
// and its next load read them through the daemon again (the bench's first warm pass after the
// copies ran at a quarter of the later ones).
TEST_CASE("RamPromoter: a burst of asks while the worker copies is queued whole, within the tier's bytes") {
  test::TempDir dir;
  FirstCopyWaits store;
  RamTier tier(Fd(::open(dir.path().c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC)), 1 << 20);
  RamPromoter promoter(store, tier);
  promoter.Start();
  REQUIRE(promoter.Enqueue(Nth(0), std::nullopt, 10000));
  store.started.get_future().wait();  // the worker holds block 0
  for (int i = 1; i < 40; i++) CHECK(promoter.Enqueue(Nth(i), std::nullopt, 10000));
  CHECK(promoter.Pending() == 40);
  CHECK(promoter.Skipped() == 0);
  CHECK_FALSE(promoter.Enqueue(Nth(7), std::nullopt, 10000));  // queued already: not a skip
  CHECK(promoter.Skipped() == 0);
  // 400,000 bytes are queued; two more of 400,000 would pass the 1 MiB tier: the second is skipped.
  CHECK(promoter.Enqueue(Nth(40), std::nullopt, 400000));
  CHECK(promoter.QueuedBytes() == 800000);
  CHECK_FALSE(promoter.Enqueue(Nth(41), std::nullopt, 400000));
  CHECK(promoter.Skipped() == 1);
  store.go.set_value();
  WaitUntilIdle(promoter);
  CHECK(promoter.QueuedBytes() == 0);  // every copy done gave its bytes back
  promoter.Stop();
}

// Regression (review, 2026-12-06): nothing kept the tier from taking memory the machine did not
// have free: with `[ram] bytes` near MemTotal, each promotion allocated more tmpfs (unreclaimable
// without swap) until the kernel OOM-killed a process, likely an engine. A copy is now made only
// while MemAvailable stays above a floor after it; skipped otherwise (counted), the block served
// from disk as before.
TEST_CASE("RamPromoter: no copy while the machine's available memory is below the floor") {
  PromoterHarness<MemoryStore> h;
  uint64_t available = 100 << 20;
  {
    RamPromoter promoter(h.store, h.tier);
    promoter.SetMemoryGauge([&] { return available; }, /*floor=*/100 << 20);
    promoter.Start();
    REQUIRE(promoter.Enqueue(h.address, std::nullopt, 10000));
    WaitUntilIdle(promoter);
    CHECK(h.tier.Stats().copies == 0);
    CHECK(promoter.SkippedForMemory() == 1);
    available = 200 << 20;  // room again: the next ask is copied
    REQUIRE(promoter.Enqueue(h.address, std::nullopt, 10000));
    WaitUntilIdle(promoter);
    CHECK(h.tier.Stats().copies == 1);
    CHECK(promoter.SkippedForMemory() == 1);
    promoter.Stop();
  }
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
