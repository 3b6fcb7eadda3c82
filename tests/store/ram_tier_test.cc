// RamTier (store/ram_tier.h): verified copies within a byte budget, least recently used first
// out, found only at the region they were made from, forgotten without taking a descriptor
// from whoever holds one, and never made from bytes that fail their checksums.
#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <tuple>
#include <vector>

#include "store/memory_store.h"
#include "store/ram_tier.h"
#include "tests/support/fault_env.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

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

CacheIdentity Numbered(int n) {
  CacheIdentity id = SampleIdentity("acme");
  id.chain[0][0] = static_cast<uint8_t>(n);
  return id;
}

Fd OpenDir(const std::string& path) { return Fd(::open(path.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC)); }

// The names in `path` but . and ..: a copy never has one.
int NamesIn(const std::string& path) {
  int n = 0;
  DIR* d = ::opendir(path.c_str());
  while (dirent* e = ::readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  ::closedir(d);
  return n;
}

Bytes ReadCopy(const RamCopy& copy) {
  Bytes out(copy.size());
  REQUIRE(PreadFull(copy.fd(), out, 0) == StatusCode::kOk);
  return out;
}

// A store with blocks 1..n of `size` bytes each, and a tier of `budget` bytes beside it.
struct TierHarness {
  explicit TierHarness(uint64_t budget, Env& env = Env::Posix(), size_t max_copies = RamTier::kNoCopyLimit)
      : tier(OpenDir(dir.path()), budget, env, max_copies) {}
  BlockInfo Commit(int n, size_t size) {
    REQUIRE(CommitBlock(store, Numbered(n), Payload(size, static_cast<uint8_t>(n))) == StatusCode::kOk);
    return store.StatAttributes(AddressOf(Numbered(n))).value();
  }
  StatusCode Promote(int n) {
    auto reader = store.Open(AddressOf(Numbered(n)));
    REQUIRE(reader.ok());
    return tier.Promote(AddressOf(Numbered(n)), reader.value()->info().region_id, *reader.value());
  }
  std::shared_ptr<const RamCopy> Find(int n) {
    auto info = store.StatAttributes(AddressOf(Numbered(n)));
    return info.ok() ? tier.Find(AddressOf(Numbered(n)), info->region_id) : nullptr;
  }
  test::TempDir dir;
  MemoryStore store;
  RamTier tier;
};

TEST_CASE("RamTier: a promoted block is found with its verified bytes, in a file with no name") {
  TierHarness h(1 << 20);
  h.Commit(1, 200000);
  CHECK(h.Find(1) == nullptr);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  std::shared_ptr<const RamCopy> copy = h.Find(1);
  REQUIRE(copy);
  CHECK(copy->size() == 200000);
  CHECK(ReadCopy(*copy) == Payload(200000, 1));
  CHECK(NamesIn(h.dir.path()) == 0);
  CHECK(h.Promote(1) == StatusCode::kExists);  // one copy per block
  RamTierStats s = h.tier.Stats();
  CHECK(s.copies == 1);
  CHECK(s.bytes_held == 200704);  // whole pages: what the copy takes of the tmpfs
  CHECK(s.promotions == 1);
  CHECK(s.hits == 0);  // found, not yet served from: the open says so (Touch)
  CHECK(s.failed_by.total() == 0);
}

// Every file operation of the tier goes through its Env: a tmpfs that cannot make the file,
// has no room for it or fails a write costs that copy, counted, and nothing else.
TEST_CASE("RamTier: its files go through Env, and a failing one costs only the copy") {
  using Op = test::FaultEnv::Op;
  using Fault = test::FaultEnv::Fault;
  test::FaultEnv env;
  TierHarness h(1 << 20, env);
  h.Commit(1, 200000);
  for (auto [op, fault, expected] : {std::tuple{Op::kCreate, Fault::kIoError, StatusCode::kIoError},
                                     std::tuple{Op::kAllocate, Fault::kNoSpace, StatusCode::kNoSpace},
                                     std::tuple{Op::kWrite, Fault::kIoError, StatusCode::kIoError}}) {
    CAPTURE(static_cast<int>(op));
    env.FailNext(op, fault);
    CHECK(h.Promote(1) == expected);
    CHECK(h.Find(1) == nullptr);
  }
  CHECK(h.tier.Stats().failed_by.total() == 3);
  CHECK(h.tier.Stats().failed_by.io == 2);  // the create and the write
  CHECK(h.tier.Stats().failed_by.no_space == 1);
  const uint64_t before = env.calls();
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  std::vector<Op> ops = env.ops();
  ops.erase(ops.begin(), ops.begin() + static_cast<long>(before));
  CHECK(ops == std::vector<Op>{Op::kCreate, Op::kAllocate, Op::kWrite});  // one slice: 200000 bytes
  std::shared_ptr<const RamCopy> copy = h.Find(1);
  REQUIRE(copy);
  CHECK(ReadCopy(*copy) == Payload(200000, 1));
  CHECK(NamesIn(h.dir.path()) == 0);
}

// Regression (review, 2026-12-06): each copy holds a descriptor, and only bytes bounded them: a
// tier of 1/16 of memory holds a million copies of 4 KiB blocks, past the daemon's descriptor
// limit, and the store's own opens then failed (EAGAIN to every tenant).
TEST_CASE("RamTier: copies are bounded by count as well as bytes, least recently used first") {
  test::FaultEnv env;
  TierHarness h(1 << 20, env, 2);
  for (int n = 1; n <= 3; ++n) h.Commit(n, 4096);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  REQUIRE(h.Find(1));  // 2 is now the least recently used
  REQUIRE(h.Promote(3) == StatusCode::kOk);
  CHECK(h.tier.Stats().copies == 2);
  CHECK(h.tier.Stats().evictions == 1);
  CHECK(h.Find(2) == nullptr);
  CHECK(h.Find(1) != nullptr);
  CHECK(h.Find(3) != nullptr);
}

TEST_CASE("RamTier: the budget holds, and the least recently used copy goes first") {
  TierHarness h(3 * 102400);  // three blocks of 25 pages
  for (int n = 1; n <= 4; ++n) h.Commit(n, 102400);
  for (int n = 1; n <= 3; ++n) REQUIRE(h.Promote(n) == StatusCode::kOk);
  CHECK(h.tier.Stats().bytes_held == 307200);
  REQUIRE(h.Find(1));  // 1 is now more recent than 2 and 3
  REQUIRE(h.Promote(4) == StatusCode::kOk);
  CHECK(h.Find(2) == nullptr);  // the least recently used went
  CHECK(h.Find(1) != nullptr);
  CHECK(h.Find(3) != nullptr);
  CHECK(h.Find(4) != nullptr);
  RamTierStats s = h.tier.Stats();
  CHECK(s.bytes_held == 307200);
  CHECK(s.copies == 3);
  CHECK(s.evictions == 1);
}

// Regression (review, 2026-12-07): the LRU end was evicted even while passthrough files had it
// open, which freed no tmpfs page: the budget believed there was room, the new copy's fallocate
// failed (no_space), and the copy lost was the one in use. A copy held elsewhere is skipped.
TEST_CASE("RamTier: a copy held open is never evicted for room: the next least recently used goes") {
  TierHarness h(2 * 102400);
  for (int n = 1; n <= 4; ++n) h.Commit(n, 102400);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  std::shared_ptr<const RamCopy> one = h.Find(1);  // held open as a backing file would be
  REQUIRE(one);
  REQUIRE(h.Find(2));  // 1 is now the least recently used
  REQUIRE(h.Promote(3) == StatusCode::kOk);
  CHECK(h.Find(2) == nullptr);  // the one no file holds went
  CHECK(h.Find(1) == one);
  CHECK(h.tier.Stats().evictions == 1);
  // Every copy held: nothing to drop that would free memory, and nothing is dropped.
  std::shared_ptr<const RamCopy> three = h.Find(3);
  CHECK(h.Promote(4) == StatusCode::kExhausted);
  CHECK(h.tier.Stats().evictions == 1);
  CHECK(h.tier.Stats().copies == 2);
  three.reset();
  CHECK(h.Promote(4) == StatusCode::kOk);  // 3 is free now
  CHECK(h.Find(3) == nullptr);
  CHECK(h.Find(1) == one);
}

// Regression (review, 2026-12-07): a copy dropped while a file held it (its block left) left the
// budget at once but the tmpfs only when that file closed: a copy then begun in its place failed
// its fallocate. The budget now counts what the tmpfs holds.
// Review (2026-12-07): only the copies the tier held counted against max_copies; one dropped
// (its block unlinked) while a passthrough open held it kept its descriptor uncounted, and the
// tier made max_copies more on top.
TEST_CASE("RamTier: a copy dropped while open counts against max_copies until its last holder lets go") {
  TierHarness h(1 << 20, Env::Posix(), 2);
  BlockInfo one = h.Commit(1, 4096);
  h.Commit(2, 4096);
  h.Commit(3, 4096);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  std::shared_ptr<const RamCopy> held = h.Find(1);
  h.tier.Forget(one.address);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  REQUIRE(h.Promote(3) == StatusCode::kOk);  // room made by dropping 2: 1 still holds a descriptor
  CHECK(h.Find(2) == nullptr);
  CHECK(h.tier.Stats().copies == 1);
  held.reset();
  REQUIRE(h.Promote(2) == StatusCode::kOk);  // 1's descriptor is gone: 2 fits beside 3
  CHECK(h.tier.Stats().copies == 2);
  CHECK(h.Find(3) != nullptr);
}

TEST_CASE("RamTier: a copy dropped while open counts against the budget until its last holder lets go") {
  TierHarness h(2 * 102400);
  BlockInfo one = h.Commit(1, 102400);
  h.Commit(2, 102400);
  h.Commit(3, 102400);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  std::shared_ptr<const RamCopy> held = h.Find(1);
  REQUIRE(held);
  h.tier.Forget(one.address);
  CHECK(h.tier.Stats().bytes_held == 0);
  CHECK(h.tier.Stats().bytes_dropped_open == 102400);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  // 1's pages are still on the tmpfs: 3 fits only once 2 went.
  REQUIRE(h.Promote(3) == StatusCode::kOk);
  CHECK(h.tier.Stats().evictions == 1);
  CHECK(h.Find(2) == nullptr);
  held.reset();  // now they are gone: 2 fits beside 3
  CHECK(h.tier.Stats().bytes_dropped_open == 0);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  CHECK(h.tier.Stats().evictions == 1);
  CHECK(h.Find(3) != nullptr);
  CHECK(h.tier.Stats().bytes_held == 2 * 102400);
}

TEST_CASE("RamTier: a block larger than the whole budget is never held") {
  TierHarness h(102400);
  h.Commit(1, 102401);  // one byte more than the budget: one page more
  h.Commit(2, 50000);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  CHECK(h.Promote(1) == StatusCode::kTooLarge);
  CHECK(h.Find(1) == nullptr);
  CHECK(h.Find(2) != nullptr);  // nothing was dropped for it
  RamTierStats s = h.tier.Stats();
  CHECK(s.too_large == 1);
  CHECK(s.evictions == 0);
  CHECK(s.bytes_held == 53248);
}

TEST_CASE("RamTier: a copy is found only at the region it was made from") {
  TierHarness h(1 << 20);
  BlockInfo first = h.Commit(1, 1000);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  CHECK(h.tier.Find(first.address, first.region_id + 1) == nullptr);
  // The block replaced at its address: a new region, and the old copy never answers for it.
  REQUIRE(h.store.Invalidate(first.address) == StatusCode::kOk);
  BlockInfo second = h.Commit(1, 2000);
  REQUIRE(second.region_id != first.region_id);
  CHECK(h.Find(1) == nullptr);
  CHECK_FALSE(h.tier.Holds(first.address, second.region_id));
  REQUIRE(h.Promote(1) == StatusCode::kOk);  // takes the old copy's place
  REQUIRE(h.Find(1));
  CHECK(h.Find(1)->size() == 2000);
  CHECK(h.tier.Find(first.address, first.region_id) == nullptr);
  CHECK(h.tier.Stats().copies == 1);
}

TEST_CASE("RamTier: a forgotten copy is a miss, and a handle held before still reads its bytes") {
  TierHarness h(1 << 20);
  BlockInfo info = h.Commit(1, 300000);
  REQUIRE(h.Promote(1) == StatusCode::kOk);
  std::shared_ptr<const RamCopy> held = h.Find(1);
  REQUIRE(held);
  h.tier.Forget(info.address);
  CHECK(h.Find(1) == nullptr);
  CHECK_FALSE(h.tier.Holds(info.address, info.region_id));
  CHECK(ReadCopy(*held) == Payload(300000, 1));
  RamTierStats s = h.tier.Stats();
  CHECK(s.copies == 0);
  CHECK(s.bytes_held == 0);
  CHECK(s.forgotten == 1);
}

TEST_CASE("RamTier: a block with a flipped byte is never promoted, and nothing is kept") {
  TierHarness h(1 << 20);
  BlockInfo info = h.Commit(1, 200000);
  REQUIRE(h.store.TEST_CorruptByte(info.address, 150000));
  CHECK(h.Promote(1) == StatusCode::kChecksumMismatch);
  CHECK(h.tier.Find(info.address, info.region_id) == nullptr);
  CHECK_FALSE(h.tier.Holds(info.address, info.region_id));
  RamTierStats s = h.tier.Stats();
  CHECK(s.copies == 0);
  CHECK(s.bytes_held == 0);
  CHECK(s.promotions == 0);
  CHECK(s.failed_by.total() == 1);
  CHECK(s.failed_by.checksum == 1);
  // The reader dropped the block as it does for any read of bad bytes.
  CHECK(h.store.Stats().tenants["acme"].checksum_failures == 1);
  CHECK(NamesIn(h.dir.path()) == 0);
}

// A reader that runs `during` before its first read: what happens to the tier while a copy is
// being made.
class InterruptedReader final : public BlockReader {
 public:
  InterruptedReader(BlockReader& inner, std::function<void()> during)
      : inner_(inner), during_(std::move(during)) {}
  const BlockInfo& info() const override { return inner_.info(); }
  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) override {
    if (during_) std::exchange(during_, nullptr)();
    return inner_.Read(offset, out);
  }

 private:
  BlockReader& inner_;
  std::function<void()> during_;
};

TEST_CASE("RamTier: a block forgotten while it is copied is not kept") {
  TierHarness h(1 << 20);
  BlockInfo info = h.Commit(1, 200000);
  auto reader = h.store.Open(info.address);
  REQUIRE(reader.ok());
  InterruptedReader forgetting(*reader.value(), [&] {
    CHECK(h.tier.Holds(info.address, info.region_id));  // in flight
    h.tier.Forget(info.address);
  });
  CHECK(h.tier.Promote(info.address, info.region_id, forgetting) == StatusCode::kNotFound);
  CHECK(h.tier.Find(info.address, info.region_id) == nullptr);
  RamTierStats s = h.tier.Stats();
  CHECK(s.copies == 0);
  CHECK(s.bytes_held == 0);
  CHECK(s.failed_by.total() == 1);
  CHECK(s.failed_by.left == 1);
}

// Regression (2026-12-06): a mount whose kernel refuses backing files turned passthrough off
// but kept the copies made before, up to the whole budget of tmpfs memory, never served.
TEST_CASE("RamTier: a closed tier drops its copies, keeps none in progress, and makes no more") {
  TierHarness h(1 << 20);
  BlockInfo one = h.Commit(1, 100000);
  h.Commit(2, 100000);
  REQUIRE(h.Promote(2) == StatusCode::kOk);
  std::shared_ptr<const RamCopy> held = h.Find(2);
  REQUIRE(held);
  auto reader = h.store.Open(one.address);
  REQUIRE(reader.ok());
  InterruptedReader closing(*reader.value(), [&] { h.tier.Close(); });
  CHECK(h.tier.Promote(one.address, one.region_id, closing) == StatusCode::kNotFound);
  CHECK(h.Find(1) == nullptr);
  CHECK(h.Find(2) == nullptr);
  CHECK(ReadCopy(*held) == Payload(100000, 2));  // a descriptor held before still reads
  RamTierStats s = h.tier.Stats();
  CHECK(s.copies == 0);
  CHECK(s.bytes_held == 0);
  CHECK(h.Promote(2) == StatusCode::kNotSupported);
  CHECK(h.tier.Stats().copies == 0);
}

TEST_CASE("RamTier: copies in flight count against the budget") {
  TierHarness h(150000);
  BlockInfo one = h.Commit(1, 100000);
  h.Commit(2, 100000);
  auto reader = h.store.Open(one.address);
  REQUIRE(reader.ok());
  StatusCode second = StatusCode::kOk;
  InterruptedReader racing(*reader.value(), [&] { second = h.Promote(2); });
  CHECK(h.tier.Promote(one.address, one.region_id, racing) == StatusCode::kOk);
  CHECK(second == StatusCode::kExhausted);  // 2 did not fit beside 1's copy in progress
  CHECK(h.tier.Stats().bytes_held == 102400);
}

}  // namespace
}  // namespace gpucache
