// What the daemon logs for an operator about events the store only counts: each line says what
// happened, where, and what to do (fs/store_events.h). Checked through the captured log.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "fs/ram_promoter.h"
#include "store/block_file.h"
#include "store/file_store.h"
#include "store/memory_store.h"
#include "store/ram_tier.h"
#include "tests/support/commit_block.h"
#include "tests/support/fault_env.h"
#include "tests/support/fs_harness.h"
#include "tests/support/log_capture.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using namespace test;

// Two region ids an epoch (instead of about 4 billion): the third fill makes the store fence.
class SmallEpochs final : public IndexedStore {
 public:
  explicit SmallEpochs(StoreOptions options)
      : IndexedStore(TwoIdsAnEpoch(std::move(options)), std::make_unique<MemoryMedium>()) {}

 private:
  static StoreOptions TwoIdsAnEpoch(StoreOptions options) {
    options.region_ids_per_epoch = 2;
    return options;
  }
};

TEST_CASE("Filesystem log: an automatic fence names the new epoch and the fills it fenced") {
  BasicFsHarness<SmallEpochs> h;
  LogCapture log;
  const uint64_t first = h.store.Epoch();
  Reply open1 = h.CreatePart(SampleBlock(1));
  Reply open2 = h.CreatePart(SampleBlock(2));
  REQUIRE(open1.err == 0);
  REQUIRE(open2.err == 0);
  CHECK(log.text().find("automatic fence") == std::string::npos);

  Reply third = h.CreatePart(SampleBlock(3));  // the epoch gave out its ids: fenced first
  REQUIRE(third.err == 0);
  REQUIRE(h.store.Stats().automatic_fences == 1);
  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: automatic fence") != std::string::npos);
  CHECK(text.find("into epoch " + std::to_string(first + 1)) != std::string::npos);
  CHECK(text.find("2 fill(s) open then hear ESTALE") != std::string::npos);
  for (Reply* r : {&open1, &open2, &third}) h.Close(*r->handle);
}

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// A Filesystem over a file store whose every file operation goes through a FaultEnv.
struct FaultyFileFs {
  FaultyFileFs() : config(ParseConfig(FsConfigText("daemon"), "filesystem_test.toml")) {
    StoreOptions options = StoreOptionsOf(config);
    options.env = &env;
    std::string error;
    store = OpenFileStore(data_dir, options, nullptr, &error);
    REQUIRE_MESSAGE(store, error);
    fs = std::make_unique<Filesystem>(config, *store);
  }

  // The inode of the committed block `id`, looked up as root; REQUIREs every step.
  uint64_t LookupBlock(const CacheIdentity& id) {
    uint64_t ino = kRootIno;
    for (const std::string& name : {id.tenant, AddressOf(id).ns, AddressOf(id).block}) {
      Reply entry = ReplyToEntry(fs->Lookup(kRoot, ino, name));
      REQUIRE(entry.err == 0);
      ino = entry.ino;
    }
    return ino;
  }
  // Opens the committed block `id` as root; REQUIREs every step.
  std::unique_ptr<Handle> OpenBlock(const CacheIdentity& id) {
    Reply open = ReplyToOpen(fs->Open(kRoot, LookupBlock(id), O_RDONLY));
    REQUIRE(open.err == 0);
    return std::move(open.handle);
  }
  bool MetricsSay(const std::string& sample) {
    return fs->RenderAllMetrics().find(sample + "\n") != std::string::npos;
  }

  TempDir tmp;
  const std::string data_dir = tmp.path() + "/data";
  FaultEnv env;
  Config config;
  std::unique_ptr<IndexedStore> store;
  std::unique_ptr<Filesystem> fs;
};

TEST_CASE("Filesystem log: a backing read error names the data directory, the block and the errno") {
  FaultyFileFs f;
  const CacheIdentity id = SampleIdentity("acme");
  CommitBlock(*f.store, id, Payload(5000), Owner{1000, 1000});
  std::unique_ptr<Handle> h = f.OpenBlock(id);
  LogCapture log;
  f.env.FailNext(FaultEnv::Op::kRead, FaultEnv::Fault::kIoError);  // the payload's read
  Bytes out(5000);
  CHECK(f.fs->Read(*h, 0, out).status() == StatusCode::kIoError);

  // A failing device fails every read: a few lines a minute for it, not one a read.
  for (int i = 0; i < 4; i++) {
    f.env.FailNext(FaultEnv::Op::kRead, FaultEnv::Fault::kIoError);
    CHECK(f.fs->Read(*h, 0, out).status() == StatusCode::kIoError);
  }
  f.fs->Release(*h);

  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: backing read error: EIO reading block " + AddressOf(id).RelativePath()) !=
        std::string::npos);
  CHECK(text.find("in data directory " + f.data_dir) != std::string::npos);
  CHECK(text.find("gpucachectl isolate MNT " + f.data_dir) != std::string::npos);
  CHECK(CountOf(text, "backing read error") == 3);
}

// Regression: a backing read error was counted and logged only when a client's read met it; the
// RAM tier's copy (and the cold tier's pack) read the same device through readers of their own,
// so a failing device that only they read showed in no gpucache_backing_errors_total{op="read"}
// and no log line, only as gpucache_ram_promotion_failures_total{reason="io"}.
TEST_CASE("Filesystem log: a RAM-tier copy that cannot read its block is a backing read error naming the data directory") {
  FaultyFileFs f;
  const CacheIdentity id = SampleIdentity("acme");
  const BlockAddress address = AddressOf(id);
  CommitBlock(*f.store, id, Payload(5000), Owner{1000, 1000});
  const std::string ram_dir = f.tmp.path() + "/ram";
  REQUIRE(::mkdir(ram_dir.c_str(), 0700) == 0);
  RamTier tier(Fd(::open(ram_dir.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC)), 1 << 20);
  RamPromoter promoter(*f.store, tier);
  promoter.Start();
  LogCapture log;
  f.env.FailNextReadFrom(kBlockDataOffset, FaultEnv::Fault::kIoError);  // the payload's read
  REQUIRE(promoter.Enqueue(address, std::nullopt, 5000));
  for (int i = 0; i < 5000 && promoter.Pending() > 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  promoter.Stop();
  REQUIRE(tier.Stats().failed_by.io == 1);

  CHECK(f.MetricsSay("gpucache_backing_errors_total{op=\"read\"} 1"));
  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: backing read error: EIO reading block " + address.RelativePath()) !=
        std::string::npos);
  CHECK(text.find("in data directory " + f.data_dir) != std::string::npos);
}

constexpr const char* kOneReadError = "gpucache_backing_errors_total{op=\"read\"} 1";

// Regression: an EIO reading a block file's header at its open (the identity check every open
// makes) reached the reader and nothing else: no gpucache_backing_errors_total{op="read"}, no
// line naming the data directory, though the device failed as surely as on a payload read.
TEST_CASE("Filesystem log: an open that cannot read its block's header is a backing read error naming the data directory") {
  FaultyFileFs f;
  const CacheIdentity id = SampleIdentity("acme");
  CommitBlock(*f.store, id, Payload(5000), Owner{1000, 1000});
  const uint64_t ino = f.LookupBlock(id);
  LogCapture log;
  f.env.FailNext(FaultEnv::Op::kRead, FaultEnv::Fault::kIoError);  // the header's read at the open
  CHECK(ReplyToOpen(f.fs->Open(kRoot, ino, O_RDONLY)).err == EIO);
  CHECK(f.MetricsSay(kOneReadError));
  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: backing read error: EIO reading block " + AddressOf(id).RelativePath()) !=
        std::string::npos);
  CHECK(text.find("in data directory " + f.data_dir) != std::string::npos);

  // So is a stat that reads the header for the block's identity. Neither is proof of damage:
  // the block stays, and opens once the device reads again.
  f.env.FailNext(FaultEnv::Op::kRead, FaultEnv::Fault::kIoError);
  CHECK(f.store->Stat(AddressOf(id)).status() == StatusCode::kIoError);
  CHECK(f.store->Stats().read_errors == 2);
  std::unique_ptr<Handle> h = f.OpenBlock(id);
  f.fs->Release(*h);
}

// Regression: a commit that read its payload back (written out of order, so its writes could
// not feed the checksums) and met an EIO failed the commit with EIO, counted and logged nowhere.
TEST_CASE("Filesystem log: a commit whose read-back of its payload fails is a backing read error naming the data directory") {
  FaultyFileFs f;
  const CacheIdentity id = SampleIdentity("acme");
  const BlockAddress a = AddressOf(id);
  const Bytes payload = Payload(5000);
  const Owner owner{1000, 1000};
  REQUIRE(f.store->CreateNamespace(a.tenant, a.ns, owner) == StatusCode::kOk);
  Result<ReservationId> fill = f.store->Reserve(a, owner);
  REQUIRE(fill.ok());
  REQUIRE(f.store->SetIdentity(fill.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
  REQUIRE(f.store->Write(fill.value(), 2500, std::span(payload).subspan(2500)).ok());  // the end first
  REQUIRE(f.store->Write(fill.value(), 0, std::span(payload).first(2500)).ok());
  LogCapture log;
  f.env.FailNextReadFrom(kBlockDataOffset, FaultEnv::Fault::kIoError);  // the seal's read-back
  CHECK(f.store->Commit(fill.value()) == StatusCode::kIoError);
  CHECK(f.MetricsSay(kOneReadError));
  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: backing read error: EIO reading block " + a.RelativePath()) != std::string::npos);
  CHECK(text.find("in data directory " + f.data_dir) != std::string::npos);
  CHECK(f.store->Commit(fill.value()) == StatusCode::kOk);  // the fill stayed: tried again
}

// Regression: a block file truncated after its open (by something outside gpucache) fails its
// reads as an EIO does, and was logged as one: "the device may be failing ... gpucachectl
// isolate", advice that would take a healthy device out of service.
TEST_CASE("Filesystem log: a block file cut short after its open is counted but not blamed on the device") {
  FaultyFileFs f;
  const CacheIdentity id = SampleIdentity("acme");
  CommitBlock(*f.store, id, Payload(5000), Owner{1000, 1000});
  const std::string file = f.store->BackingPath(AddressOf(id));
  std::unique_ptr<Handle> h = f.OpenBlock(id);
  std::filesystem::resize_file(file, kBlockDataOffset + 1000);
  LogCapture log;
  Bytes out(5000);
  CHECK(f.fs->Read(*h, 0, out).status() == StatusCode::kIoError);
  f.fs->Release(*h);
  CHECK(f.MetricsSay(kOneReadError));
  const std::string text = log.text();
  CAPTURE(text);
  CHECK(text.find("warning: block file cut short: " + file + " (block " + AddressOf(id).RelativePath() +
                  ", data directory " + f.data_dir + ") holds " + std::to_string(kBlockDataOffset + 1000) +
                  " bytes, its block needs " + std::to_string(kBlockDataOffset + 5000)) != std::string::npos);
  CHECK(text.find("backing read error") == std::string::npos);
  CHECK(text.find("gpucachectl isolate") == std::string::npos);

  // What the line promises: the next open finds the file short and sets the block aside.
  CHECK(ReplyToOpen(f.fs->Open(kRoot, f.LookupBlock(id), O_RDONLY)).err == EIO);
  CHECK(f.store->StatAttributes(AddressOf(id)).status() == StatusCode::kNotFound);
  CHECK_FALSE(std::filesystem::exists(file));
  CHECK_FALSE(std::filesystem::is_empty(f.data_dir + "/damaged"));
}

}  // namespace
}  // namespace gpucache
