// A reseal or reclaim reads a block's locator and then writes or deletes it; within one daemon
// the sink's upload of a newer locator for the same block must not land between the two
// (docs/cold-tier.md, "Key rotation"; cold/locator_locks.h). The test drives the sink's upload
// exactly there: when the operation reads the locator, a second thread uploads the newer
// pack through the tier's sink, and the read waits for that upload (bounded: with the lock,
// the upload cannot finish until the operation's write is done).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cold/locator.h"
#include "cold/ops.h"
#include "cold/sink.h"
#include "cold/tier.h"
#include "store/memory_store.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {

// Forwards to a MemoryObjectStore; the first GET of `trigger_key` reads it, then runs
// `between` on another thread and waits (up to a bound) for it to finish before answering
// with what it read, as a slow reply would.
class RacingStore final : public ForwardingObjectStore {
 public:
  RacingStore(MemoryObjectStore& inner, std::string trigger_key)
      : ForwardingObjectStore(inner), trigger_key_(std::move(trigger_key)) {}
  ~RacingStore() override {
    if (thread_.joinable()) thread_.join();
  }
  void SetBetween(std::function<void()> f) { between_ = std::move(f); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  ObjectResult<std::vector<uint8_t>> Get(std::string_view k, uint64_t max) override {
    auto r = inner_.Get(k, max);
    if (k != trigger_key_ || triggered_.exchange(true)) return r;
    thread_ = std::thread([this] {
      between_();
      std::lock_guard l(mu_);
      done_ = true;
      cv_.notify_all();
    });
    std::unique_lock l(mu_);
    // Without the lock the upload finishes at once; with it, it waits for our write.
    cv_.wait_for(l, std::chrono::milliseconds(500), [&] { return done_; });
    return r;
  }

 private:
  const std::string trigger_key_;
  std::function<void()> between_;
  std::atomic<bool> triggered_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// Forwards to a MemoryObjectStore; the first listing under `trigger_prefix` is taken, then
// `between` runs (on the listing's thread) before the listing is answered, as a listing of a
// large bucket that takes a second would be answered with what it saw at its start.
class ListRacingStore final : public ForwardingObjectStore {
 public:
  // Runs `between` after the listing of `trigger_prefix` that follows `skip` others of it.
  ListRacingStore(MemoryObjectStore& inner, std::string trigger_prefix, int skip = 0)
      : ForwardingObjectStore(inner), trigger_prefix_(std::move(trigger_prefix)), skip_(skip) {}
  void SetBetween(std::function<void()> f) { between_ = std::move(f); }
  ObjectResult<std::vector<ObjectMeta>> List(std::string_view prefix) override {
    auto r = inner_.List(prefix);
    if (prefix == trigger_prefix_ && between_ && skip_.fetch_sub(1) <= 0 && !triggered_.exchange(true)) between_();
    return r;
  }

 private:
  const std::string trigger_prefix_;
  std::atomic<int> skip_;
  std::function<void()> between_;
  std::atomic<bool> triggered_{false};
};

void PutAll(MemoryObjectStore& s3, const PackedPair& p) {
  s3.Set(p.object_key, p.object);
  s3.Set(p.manifest_key, p.manifest);
  for (size_t i = 0; i < p.locators.size(); i++) {
    s3.Set(LocatorKey(kPrefix, p.decoded.entries[i].address), p.locators[i]);
  }
}

ColdTierOptions Manual() {
  ColdTierOptions o;
  o.prefix = kPrefix;
  o.write_back = WriteBack::kManual;
  return o;
}

const std::string kBlock0 = LocatorKey(kPrefix, AddressOf(NthIdentity(0)));

}  // namespace

TEST_CASE("Locator race: a reseal never overwrites a newer locator the sink uploads meanwhile") {
  MemoryObjectStore s3;
  auto keys = std::make_shared<SealKeys>(Keyring::Of({{"k1", SecretOf(1)}}, "k1"));
  PutAll(s3, MakePack(0, 1, 4096, "acme", keys->Get()));  // block 0, sealed under k1
  keys->Set(Keyring::Of({{"k1", SecretOf(1)}, {"k2", SecretOf(2)}}, "k2"));
  PackedPair newer = MakePack(0, 1, 5000, "acme", keys->Get());  // block 0 packed again
  const std::vector<uint8_t> newer_locator = newer.locators[0];

  RacingStore racing(s3, kBlock0);
  MemoryStore hot;
  ColdTier tier(hot, racing, Manual(), keys);
  std::atomic<bool> accepted{false};
  racing.SetBetween([&] {
    accepted = tier.sink().Submit(std::move(newer)).admission == Admission::kAccepted;
    tier.sink().Drain();
  });
  ResealReport r = tier.ops().Reseal(UINT64_MAX);
  racing.Join();
  CHECK(accepted.load());
  CHECK_FALSE(r.error);
  CHECK(tier.sink().Stats().uploaded == 1);
  CHECK(s3.Objects().at(kBlock0) == newer_locator);
}

TEST_CASE("Locator race: a reclaim never deletes a newer locator the sink uploads meanwhile") {
  MemoryObjectStore s3;
  PackedPair older = MakePack(0, 1, 4096);
  PutAll(s3, older);
  PackedPair newer = MakePack(0, 1, 5000);
  const std::vector<uint8_t> newer_locator = newer.locators[0];

  RacingStore racing(s3, kBlock0);
  MemoryStore hot;
  ColdTier tier(hot, racing, Manual(), TestKeys());
  std::atomic<bool> accepted{false};
  racing.SetBetween([&] {
    accepted = tier.sink().Submit(std::move(newer)).admission == Admission::kAccepted;
    tier.sink().Drain();
  });
  ReclaimReport r = tier.ops().Reclaim(older.manifest_digest, UINT64_MAX, {.admin = true});
  racing.Join();
  CHECK(accepted.load());
  CHECK_FALSE(r.refused);
  CHECK_FALSE(r.error);
  REQUIRE(s3.Objects().count(kBlock0) == 1);
  CHECK(s3.Objects().at(kBlock0) == newer_locator);
}

// Regression (review, 2026-12-07): a reclaim deletes the manifest's locators, then lists every
// manifest to prove the pack object unreferenced. A `cold pack` run meanwhile found the block
// without a locator, packed it again into the same object (same bytes, same key), and uploaded
// it with a new manifest and locator; the reclaim, with its listing taken before, then deleted
// the object. The new locator named nothing, the pack after called the block cold, and once its
// hot copy went the block was lost. The sink now refuses a pack of an object being reclaimed.
TEST_CASE("Locator race: a pack run beside a reclaim never has its object deleted under its new manifest") {
  MemoryObjectStore s3;
  // The reclaim lists manifests twice: before it deletes anything (a manifest it cannot read
  // stops it there), and after the locators went, to prove the object unreferenced.
  ListRacingStore racing(s3, ManifestPrefix(kPrefix), /*skip=*/1);
  MemoryStore hot;
  ColdTier tier(hot, racing, Manual(), TestKeys());
  const CacheIdentity id = NthIdentity(0);
  REQUIRE(CommitBlock(hot, id, PayloadOf(0, 4096)) == StatusCode::kOk);
  REQUIRE(tier.Pack("acme", UINT64_MAX).packed_blocks == 1);
  std::optional<Sha256> manifest;
  for (const auto& [key, bytes] : s3.Objects()) {
    if (auto d = ManifestDigestOfKey(kPrefix, key)) manifest = d;
  }
  REQUIRE(manifest);

  BackfillReport during;
  racing.SetBetween([&] { during = tier.Pack("acme", UINT64_MAX); });
  ReclaimReport r = tier.Reclaim(*manifest, UINT64_MAX, {.admin = true});
  CHECK_FALSE(r.refused);
  CHECK_FALSE(r.error);
  CHECK(during.packed_blocks == 0);  // refused while its object was being reclaimed
  CHECK(during.refused == 1);

  // A locator left for the block names an object that is there.
  const auto objects = s3.Objects();
  if (auto it = objects.find(LocatorKey(kPrefix, AddressOf(id))); it != objects.end()) {
    std::optional<Locator> l = DecodeLocator(it->second);
    REQUIRE(l);
    CHECK(objects.count(PackKey(kPrefix, l->object_digest)) == 1);
  }
  // The block is packed again by the next pack, and refills once its hot copy is gone.
  CHECK(tier.Pack("acme", UINT64_MAX).packed_blocks == 1);
  REQUIRE(hot.Invalidate(AddressOf(id)) == StatusCode::kOk);
  std::vector<uint8_t> key = EncodePhysicalKey(id);
  RefillResult refill = tier.Refill({.admin = true}, key, UINT64_MAX, Owner{1000, 1000});
  CHECK(refill.outcome.status == RefillStatus::kHit);
  tier.Stop();
}

// Regression (review, 2026-12-07): a pack is sealed when it is built. A job pending (or failed)
// across a key rotation went up later under the old key, which `cold reseal` never saw (it
// reads the bucket) and the operator then removed: its blocks were "unknown-key" misses that
// `cold pack` took for cold. It now fails before its manifest goes up, and its blocks, without
// a locator, are packed again under the current key.
TEST_CASE("Locator race: a job sealed before a key rotation fails before its manifest goes up, and its blocks are packed again") {
  MemoryObjectStore s3;
  auto keys = std::make_shared<SealKeys>(Keyring::Of({{"k1", SecretOf(1)}}, "k1"));
  MemoryStore hot;
  ColdTier tier(hot, s3, Manual(), keys);
  const CacheIdentity id = NthIdentity(0);
  REQUIRE(CommitBlock(hot, id, PayloadOf(0, 4096)) == StatusCode::kOk);
  PackedPair old = MakePack(0, 1, 4096, "acme", keys->Get());  // built and sealed under k1
  REQUIRE(tier.sink().Submit(std::move(old)).admission == Admission::kAccepted);
  keys->Set(Keyring::Of({{"k1", SecretOf(1)}, {"k2", SecretOf(2)}}, "k2"));  // rotated meanwhile
  DrainReport d = tier.sink().Drain();
  CHECK(d.uploaded == 0);
  CHECK(d.stale_seals == 1);
  CHECK(d.first_error->step == "seal");
  // Dropped, not failed: it holds none of the sink's room, nor its object against a reclaim.
  CHECK(tier.sink().Stats().failed_now == 0);
  CHECK(tier.sink().Stats().stale_seals == 1);
  CHECK(tier.sink().Stats().Balanced());
  for (const auto& [key, bytes] : s3.Objects()) {
    CAPTURE(key);
    CHECK(key.rfind(std::string(kPrefix) + "packs/", 0) == 0);  // at most its pack object: no manifest, no locator
  }
  // The block has no locator: the next pack packs it, under k2, and it refills.
  CHECK(tier.Pack("acme", UINT64_MAX).packed_blocks == 1);
  const auto objects = s3.Objects();
  auto loc = objects.find(LocatorKey(kPrefix, AddressOf(id)));
  REQUIRE(loc != objects.end());
  std::optional<Locator> l = DecodeLocator(loc->second);
  REQUIRE(l);
  CHECK(l->seal.key_id == "k2");
  tier.Stop();
}

}  // namespace gpucache::cold
