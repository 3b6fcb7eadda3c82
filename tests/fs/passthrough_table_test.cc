// PassthroughTable (fs/passthrough_table.h): never a mix of passthrough and daemon-served opens
// on one inode, one backing id per inode while any passthrough open holds it, closed with the
// last one; and the Filesystem that uses it (fs/ram_serving.h) over a MemoryStore.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <future>
#include <map>
#include <thread>
#include <vector>

#include "fs/passthrough_table.h"
#include "tests/support/fs_harness.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using namespace test;

// The kernel's backing files as the table sees them: ids handed out, which are open.
class FakeBackingFiles final : public BackingFiles {
 public:
  int Open(int fd) override {
    opens++;
    if (refuse) return 0;
    open_ids[next_id] = fd;
    return next_id++;
  }
  void Close(int backing_id) override {
    CHECK(open_ids.erase(backing_id) == 1);
    closes++;
  }
  bool refuse = false;
  int opens = 0, closes = 0;
  int next_id = 1;
  std::map<int, int> open_ids;  // id -> fd
};

std::shared_ptr<const RamCopy> SomeCopy(uint64_t region_id) {
  return std::make_shared<const RamCopy>(Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC)), 0, region_id);
}

TEST_CASE("PassthroughTable: opens of a copy share one backing id, closed by the last release") {
  PassthroughTable t;
  FakeBackingFiles k;
  auto copy = SomeCopy(7);
  auto find = [&] { return copy; };
  int a = t.Open(100, 7, find, k);
  int b = t.Open(100, 7, find, k);
  CHECK(a > 0);
  CHECK(b == a);
  CHECK(k.opens == 1);
  CHECK(t.counts().backing_files == 1);
  CHECK(t.counts().passthrough_handles == 2);
  t.Release(100, a, k);
  CHECK(k.closes == 0);
  t.Release(100, b, k);
  CHECK(k.closes == 1);
  CHECK(k.open_ids.empty());
  PassthroughTable::Counts c = t.counts();
  CHECK(c.backing_files == 0);
  CHECK(c.passthrough_handles == 0);
  CHECK(c.passthrough_opens == 2);
  // The next open registers the copy again.
  int again = t.Open(100, 7, find, k);
  CHECK(again > 0);
  CHECK(again != a);
  t.Release(100, again, k);
}

TEST_CASE("PassthroughTable: while a daemon-served open is outstanding, every open of the inode is served by the daemon") {
  PassthroughTable t;
  FakeBackingFiles k;
  std::shared_ptr<const RamCopy> copy;  // none yet
  auto find = [&] { return copy; };
  CHECK(t.Open(100, 7, find, k) == 0);
  copy = SomeCopy(7);  // the copy is made meanwhile
  CHECK(t.Open(100, 7, find, k) == 0);
  CHECK(k.opens == 0);
  CHECK(t.counts().daemon_handles == 2);
  // Another inode is not held back.
  int other = t.Open(200, 9, [] { return SomeCopy(9); }, k);
  CHECK(other > 0);
  t.Release(100, 0, k);
  t.Release(100, 0, k);
  CHECK(t.counts().daemon_handles == 0);
  int now = t.Open(100, 7, find, k);
  CHECK(now > 0);
  CHECK(now != other);
  t.Release(100, now, k);
  t.Release(200, other, k);
  CHECK(k.open_ids.empty());
}

TEST_CASE("PassthroughTable: an open of a newer block at an inode held by passthrough is never given the old copy") {
  PassthroughTable t;
  FakeBackingFiles k;
  int old = t.Open(100, 7, [] { return SomeCopy(7); }, k);
  REQUIRE(old > 0);
  CHECK(t.Open(100, 8, [] { return SomeCopy(8); }, k) == 0);
  CHECK(k.opens == 1);
  t.Release(100, 0, k);
  t.Release(100, old, k);
  CHECK(k.open_ids.empty());
  CHECK(t.counts().daemon_handles == 0);
}

TEST_CASE("PassthroughTable: a copy the kernel refuses is served by the daemon, and counted") {
  PassthroughTable t;
  FakeBackingFiles k;
  k.refuse = true;
  CHECK(t.Open(100, 7, [] { return SomeCopy(7); }, k) == 0);
  CHECK(t.counts().backing_refusals == 1);
  CHECK(t.counts().daemon_handles == 1);
  t.Release(100, 0, k);
  CHECK(t.counts().daemon_handles == 0);
}

// A Filesystem over a MemoryStore with a RAM tier, passthrough on, as the daemon wires it.
// `budget`: the tier's [ram] bytes.
struct RamHarness {
  explicit RamHarness(uint64_t budget = 1 << 20) {
    auto tier = std::make_unique<RamTier>(Fd(::open(dir.path().c_str(), O_DIRECTORY | O_RDONLY)), budget);
    auto ram = std::make_unique<RamServing>(h.store, std::move(tier));
    ram->SetPassthrough(true);
    h.fs.UseRam(std::move(ram));
  }
  // Commits a block of 100,000 bytes at `id`; its inode.
  uint64_t CommitBlock(const CacheIdentity& id) {
    h.Commit(id, Payload(100000));
    return h.Ino(h.Namespace(id), FsHarness::BlockName(id));
  }
  // An open of block inode `ino` for reading, as the kernel asks it (`k`: its backing files).
  Reply Open(uint64_t ino, FakeBackingFiles& k) { return ReplyToOpen(h.fs.Open(kWriter, ino, O_RDONLY, &k)); }
  // The inodes the filesystem has the kernel drop the pages of, from now on.
  std::vector<uint64_t>& WatchDrops() {
    h.fs.ram()->SetDropPagesHandler([this](uint64_t ino) { dropped.push_back(ino); });
    return dropped;
  }
  // The copy the background worker makes after a daemon-served open is released.
  void CopyIntoRam(const BlockAddress& a) {
    auto reader = h.store.Open(a);
    REQUIRE(reader.ok());
    REQUIRE(h.fs.ram()->tier().Promote(a, reader.value()->info().region_id, *reader.value()) == StatusCode::kOk);
  }
  TempDir dir;
  FsHarness h;
  std::vector<uint64_t> dropped;
};

// Regression (review, 2026-12-06): a kernel that takes no backing file from this daemon (one
// without CAP_SYS_ADMIN in the initial user namespace) still had every block copied after its
// first read, and the pages of its next daemon-served open dropped at each release; and (fixed
// later the same day) the copies made before the refusal were kept, never served.
// Since 2026-12-07, not at the first refusal, which may be passing (a full descriptor table),
// but at the fourth with none ever taken.
TEST_CASE("Filesystem: a kernel that refuses the first RAM copies turns passthrough off: no more copies or drops") {
  RamHarness r;
  std::vector<uint64_t>& dropped = r.WatchDrops();
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ino = r.CommitBlock(id);
  FakeBackingFiles k;
  k.refuse = true;
  r.CopyIntoRam(AddressOf(id));
  for (uint64_t n = 1; n < PassthroughTable::kRefusalsBeforeOff; ++n) {
    Reply passing = r.Open(ino, k);
    REQUIRE(passing.err == 0);
    CHECK(passing.backing_id == 0);  // the daemon serves it
    r.h.fs.Release(*passing.handle, &k);
    CHECK(r.h.fs.ram()->passthrough());  // a refusal that may be passing
    CHECK(r.h.fs.ram()->Metrics().tier.copies == 1);
  }
  dropped.clear();
  Reply refused = r.Open(ino, k);
  REQUIRE(refused.err == 0);
  CHECK(refused.backing_id == 0);  // the daemon serves it
  CHECK(r.h.fs.ram()->Metrics().opens.backing_refusals == PassthroughTable::kRefusalsBeforeOff);
  CHECK(r.h.fs.ram()->Metrics().tier.hits == 0);  // found, but not served from: no hit
  CHECK_FALSE(r.h.fs.ram()->passthrough());
  CHECK(r.h.fs.ram()->Metrics().tier.copies == 0);  // the copy made before is dropped
  CHECK(r.h.fs.ram()->Metrics().tier.bytes_held == 0);
  r.h.fs.Release(*refused.handle, &k);
  // Another block: read by the daemon, and never queued for a copy.
  CacheIdentity other = SampleIdentity("acme");
  other.chain[0] = Hash(9);
  uint64_t other_ino = r.CommitBlock(other);
  Reply next = r.Open(other_ino, k);
  REQUIRE(next.err == 0);
  CHECK(next.keep_cache);
  r.h.fs.Release(*next.handle, &k);
  CHECK(r.h.fs.ram()->PromotionsPending() == 0);
  CHECK(dropped.empty());
  CHECK(k.opens == PassthroughTable::kRefusalsBeforeOff);  // asked no more once off
}

// A refusal that passes (the kernel takes the next copy) leaves passthrough on.
TEST_CASE("Filesystem: a RAM copy the kernel refuses once, then takes, keeps passthrough on") {
  RamHarness r;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ino = r.CommitBlock(id);
  FakeBackingFiles k;
  k.refuse = true;
  r.CopyIntoRam(AddressOf(id));
  Reply refused = r.Open(ino, k);
  REQUIRE(refused.err == 0);
  CHECK(refused.backing_id == 0);
  r.h.fs.Release(*refused.handle, &k);
  CHECK(r.h.fs.ram()->passthrough());  // it was off for good after one refusal
  k.refuse = false;
  Reply taken = r.Open(ino, k);
  REQUIRE(taken.err == 0);
  CHECK(taken.backing_id > 0);
  r.h.fs.Release(*taken.handle, &k);
  CHECK(r.h.fs.ram()->passthrough());
}

TEST_CASE("Filesystem: a block held in RAM is opened by passthrough, with the store's reader held") {
  RamHarness r;
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ino = r.CommitBlock(id);
  FakeBackingFiles k;
  Reply first = r.Open(ino, k);
  REQUIRE(first.err == 0);
  CHECK(first.backing_id == 0);  // not in RAM yet: the daemon serves it
  CHECK(first.keep_cache);
  BlockAddress a = AddressOf(id);
  r.CopyIntoRam(a);
  r.h.fs.Release(*first.handle, &k);
  Reply second = r.Open(ino, k);
  REQUIRE(second.err == 0);
  CHECK(second.backing_id > 0);
  CHECK_FALSE(second.keep_cache);  // the kernel refuses it beside passthrough
  CHECK(k.open_ids.size() == 1);
  // Its reader counts the block open: an eviction now quarantines it.
  REQUIRE(r.h.store.Evict(a) == StatusCode::kOk);
  r.h.fs.BlockLeft(a);
  CHECK(r.h.store.ListQuarantine().size() == 1);
  CHECK(r.h.fs.ram()->tier().Stats().copies == 0);
  r.h.fs.Release(*second.handle, &k);
  CHECK(k.open_ids.empty());
  CHECK(r.Open(ino, k).err == ENOENT);
}

// The pages daemon-served reads cached go once the block has a copy and no daemon-served open is
// left: never under an open whose READs (readahead too) may hold them, which would make the
// drop wait for the daemon (and, at shutdown, for ever).
TEST_CASE("Filesystem: the pages of a block copied while it is read go at the last daemon-served release") {
  RamHarness r;
  std::vector<uint64_t>& dropped = r.WatchDrops();
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ino = r.CommitBlock(id);
  FakeBackingFiles k;
  Reply first = r.Open(ino, k);
  Reply second = r.Open(ino, k);
  REQUIRE(first.err == 0);
  REQUIRE(second.err == 0);
  REQUIRE(second.backing_id == 0);  // both served by the daemon
  BlockAddress a = AddressOf(id);
  r.CopyIntoRam(a);
  r.h.fs.Release(*first.handle, &k);
  CHECK(dropped.empty());  // `second` may still be reading
  r.h.fs.Release(*second.handle, &k);
  CHECK(dropped == std::vector<uint64_t>{ino});
  CHECK(r.h.fs.ram()->Metrics().page_drops == 1);
  // Passthrough opens and their releases have nothing to drop.
  Reply third = r.Open(ino, k);
  REQUIRE(third.backing_id > 0);
  r.h.fs.Release(*third.handle, &k);
  CHECK(dropped.size() == 1);
}

// A reader that stops in its first Read until let go: a copy in the making, as the tier sees it.
class ReadWaits final : public BlockReader {
 public:
  explicit ReadWaits(std::shared_ptr<BlockReader> inner) : inner_(std::move(inner)) {}
  const BlockInfo& info() const override { return inner_->info(); }
  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) override {
    if (!waited_) {
      waited_ = true;
      reading.set_value();
      go.get_future().wait();
    }
    return inner_->Read(offset, out);
  }
  std::promise<void> reading, go;

 private:
  std::shared_ptr<BlockReader> inner_;
  bool waited_ = false;
};

// Found by a metrics test under load: the last daemon-served release of a block whose copy was
// still being made dropped its pages, and the next open, still the daemon's (no copy yet), read
// every byte again. The drop waits for the copy.
TEST_CASE("Filesystem: a release while the block's copy is being made drops nothing") {
  RamHarness r;
  std::vector<uint64_t>& dropped = r.WatchDrops();
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ino = r.CommitBlock(id);
  FakeBackingFiles k;
  Reply open = r.Open(ino, k);
  REQUIRE(open.err == 0);
  BlockAddress a = AddressOf(id);
  auto inner = r.h.store.Open(a);
  REQUIRE(inner.ok());
  ReadWaits reader(inner.value());
  std::thread copy([&] { CHECK(r.h.fs.ram()->tier().Promote(a, reader.info().region_id, reader) == StatusCode::kOk); });
  reader.reading.get_future().wait();  // the copy is in flight
  r.h.fs.Release(*open.handle, &k);
  CHECK(dropped.empty());
  Reply next = r.Open(ino, k);
  CHECK(next.backing_id == 0);  // no copy yet: the daemon serves it, from the pages still cached
  reader.go.set_value();
  copy.join();
  r.h.fs.Release(*next.handle, &k);
  CHECK(dropped == std::vector<uint64_t>{ino});  // the copy is made: now they go
}

// Regression (review, 2026-12-07): opens sharing an inode's backing file never reached the
// tier, so a block always held open by overlapping readers (a shared prompt prefix: the hottest
// block) aged to the LRU end and was evicted first, and gpucache_ram_hits_total counted only
// the opens that registered the copy. Every passthrough open is now a hit and refreshes the copy.
TEST_CASE("Filesystem: opens sharing a RAM copy's backing file keep it the most recently used, and are hits") {
  RamHarness r(2 * 102400);  // two copies of 100,000 bytes (25 pages each)
  std::vector<CacheIdentity> ids(3, SampleIdentity("acme"));
  std::vector<uint64_t> inos;
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i].chain[0] = Hash(static_cast<uint8_t>(20 + i));
    inos.push_back(r.CommitBlock(ids[i]));
  }
  FakeBackingFiles k;
  r.CopyIntoRam(AddressOf(ids[0]));
  Reply held = r.Open(inos[0], k);
  REQUIRE(held.backing_id > 0);
  r.CopyIntoRam(AddressOf(ids[1]));  // now the most recently used
  for (int i = 0; i < 50; ++i) {
    Reply shared = r.Open(inos[0], k);
    REQUIRE(shared.backing_id == held.backing_id);
    r.h.fs.Release(*shared.handle, &k);
  }
  r.h.fs.Release(*held.handle, &k);
  r.CopyIntoRam(AddressOf(ids[2]));  // room for it: the least recently used goes
  RamMetrics m = r.h.fs.ram()->Metrics();
  CHECK(m.tier.evictions == 1);
  CHECK(r.h.fs.ram()->tier().HasCopy(AddressOf(ids[0]), r.h.store.StatAttributes(AddressOf(ids[0]))->region_id));
  CHECK_FALSE(r.h.fs.ram()->tier().HasCopy(AddressOf(ids[1]), r.h.store.StatAttributes(AddressOf(ids[1]))->region_id));
  CHECK(m.tier.hits == 51);
  CHECK(m.tier.hits == m.opens.passthrough_opens);
}

// Regression (review, 2026-12-07): every daemon-served release of a block larger than the whole
// tier queued it again, and the worker opened it, read its header and checked its identity only
// to be refused as too large. Such a block is counted at its release and never queued.
TEST_CASE("Filesystem: a block larger than the whole RAM tier is counted at each release and never queued") {
  RamHarness r(50000);  // no worker runs: only the release itself can count it
  CacheIdentity id = SampleIdentity("acme");
  uint64_t ino = r.CommitBlock(id);
  FakeBackingFiles k;
  for (int i = 1; i <= 3; ++i) {
    Reply open = r.Open(ino, k);
    REQUIRE(open.err == 0);
    CHECK(open.backing_id == 0);
    r.h.fs.Release(*open.handle, &k);
    CHECK(r.h.fs.ram()->PromotionsPending() == 0);  // nothing queued
    CHECK(r.h.fs.ram()->Metrics().tier.too_large == static_cast<uint64_t>(i));
  }
}

}  // namespace
}  // namespace gpucache
