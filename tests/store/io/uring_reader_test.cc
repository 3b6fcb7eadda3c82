#include "store/io/uring_reader.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "store/block_file.h"
#include "store/file_store.h"
#include "store/io/uring_source.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;

// A scratch directory under `parent` (the filesystem matters here: ext4 vs tmpfs).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent) {
    std::string tmpl = parent + "/gpucache-io-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A block file in the real format: header, zero padding to data_offset, then the payload.
struct BlockFixture {
  std::string path;
  Bytes payload;
  uint64_t data_offset = 0;
};

BlockFixture WriteBlock(const std::string& dir, size_t payload_size) {
  BlockFixture b;
  b.path = dir + "/block";
  b.payload.resize(payload_size);
  for (size_t i = 0; i < payload_size; ++i) b.payload[i] = static_cast<uint8_t>((i * 131 + 7) ^ (i >> 12));
  BlockHeader h;
  h.payload_length = payload_size;
  h.identity = EncodePhysicalKey(test::SampleIdentity());
  h.checksums = ComputeChecksums(b.payload);
  Bytes header = EncodeBlockHeader(h);
  b.data_offset = h.data_offset;
  Fd fd(::open(b.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  REQUIRE(fd.valid());
  REQUIRE(PwriteFull(fd.get(), header, 0) == StatusCode::kOk);
  REQUIRE(PwriteFull(fd.get(), b.payload, h.data_offset) == StatusCode::kOk);
  return b;
}

std::unique_ptr<UringSource> OpenSource(UringReader& reader, const BlockFixture& b) {
  Fd fd(::open(b.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  REQUIRE(fd.valid());
  auto header = ReadBlockHeader(fd.get());
  REQUIRE(header.ok());
  REQUIRE(header->data_offset == b.data_offset);
  return std::make_unique<UringSource>(reader, std::move(fd), header->data_offset);
}

// Every alignment and length edge against the file's bytes, and past-end reads against what
// FileSource (PreadFull) answers.
void CheckEveryEdge(UringReader& reader, const BlockFixture& b) {
  auto src = OpenSource(reader, b);
  Fd plain(::open(b.path.c_str(), O_RDONLY | O_CLOEXEC));
  const uint64_t n = b.payload.size();
  const uint64_t slot = reader.pool().slot_bytes();
  std::vector<uint64_t> offsets{0, 1, 511, 4095, 4096, 4097, slot - 1, slot, slot + 1,
                                n / 2, n - 4097, n - 4096, n - 4095, n - 1};
  std::vector<uint64_t> lengths{0, 1, 2, 4095, 4096, 4097, slot - 1, slot, slot + 1,
                                3 * slot + 5, n};
  for (uint64_t off : offsets) {
    for (uint64_t len : lengths) {
      CAPTURE(off);
      CAPTURE(len);
      std::vector<uint8_t> got(len, 0xEE);
      StatusCode s = src->ReadRaw(off, got);
      if (off + len <= n) {
        REQUIRE(s == StatusCode::kOk);
        CHECK(std::equal(got.begin(), got.end(), b.payload.begin() + off));
      } else {
        std::vector<uint8_t> want(len);
        StatusCode p = PreadFull(plain.get(), want, b.data_offset + off);
        CHECK(p == StatusCode::kIoError);
        CHECK(s == p);
      }
    }
  }
  // The whole payload, and one byte at the very end, and nothing past it.
  std::vector<uint8_t> all(n);
  REQUIRE(src->ReadRaw(0, all) == StatusCode::kOk);
  CHECK(all == b.payload);
  std::vector<uint8_t> last(1);
  REQUIRE(src->ReadRaw(n - 1, last) == StatusCode::kOk);
  CHECK(last[0] == b.payload[n - 1]);
  CHECK(src->ReadRaw(n, last) == StatusCode::kIoError);
  CHECK(src->ReadRaw(n + 100000, last) == StatusCode::kIoError);
  std::vector<uint8_t> none;
  CHECK(src->ReadRaw(n + 5, none) == StatusCode::kOk);  // empty, as PreadFull
  PoolCounters c = reader.pool().Counters();
  CHECK(c.free == c.slots);  // every slot back
  CHECK(c.quarantined == 0);
}

UringReaderOptions SmallOptions() {
  UringReaderOptions o;
  o.slots = 8;
  o.slot_bytes = 64 * 1024;
  o.queue_depth = 4;
  o.rings = 2;
  o.page_cache_first = false;  // the device path; page_cache_first has its own case
  return o;
}

// Payload with an unaligned tail, several slots long.
constexpr size_t kPayload = 3 * 64 * 1024 * 4 + 12345;

TEST_CASE("UringSource: reads equal the file bytes at every edge on ext4 (O_DIRECT)") {
  ScratchDir dir("/var/tmp");
  REQUIRE(!dir.path().empty());
  auto reader = UringReader::Create(SmallOptions());
  REQUIRE(reader);
  MESSAGE(reader->stats().status);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  if (reader->uring_active()) {
    CHECK(OpenSource(*reader, b)->direct());  // ext4 does direct I/O
  }
  CheckEveryEdge(*reader, b);
  UringReaderStats s = reader->stats();
  if (s.uring) CHECK(s.uring_reads > 0);
}

TEST_CASE("UringSource: buffered io_uring reads equal the file bytes") {
  ScratchDir dir("/var/tmp");
  UringReaderOptions o = SmallOptions();
  o.use_direct = false;
  auto reader = UringReader::Create(o);
  REQUIRE(reader);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  CHECK_FALSE(OpenSource(*reader, b)->direct());
  CheckEveryEdge(*reader, b);
}

TEST_CASE("UringSource: tmpfs in /dev/shm returns the same bytes") {
  ScratchDir dir("/dev/shm");
  REQUIRE(!dir.path().empty());
  auto reader = UringReader::Create(SmallOptions());
  REQUIRE(reader);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  auto src = OpenSource(*reader, b);
  CHECK(src->memory_backed());  // read with pread
  CHECK_FALSE(src->direct());
  CheckEveryEdge(*reader, b);
  // The reader itself on tmpfs: O_DIRECT where the kernel has it (6.6+), else buffered.
  Fd fd(::open(b.path.c_str(), O_RDONLY | O_CLOEXEC));
  Fd direct = OpenDirect(fd.get());
  std::string what = std::string("tmpfs O_DIRECT: ") + (direct.valid() ? "yes" : "no (buffered)");
  MESSAGE(what);
  for (uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{kPayload - 5000}}) {
    std::vector<uint8_t> got(5000);
    REQUIRE(reader->Read({fd.get(), direct.get()}, b.data_offset + off, got) == StatusCode::kOk);
    CHECK(std::equal(got.begin(), got.end(), b.payload.begin() + off));
  }
}

TEST_CASE("UringSource: with io_uring disabled every read is a pread with the same bytes") {
  ScratchDir dir("/var/tmp");
  UringReaderOptions o = SmallOptions();
  o.disable_uring = true;
  auto reader = UringReader::Create(o);
  REQUIRE(reader);
  CHECK_FALSE(reader->uring_active());
  CHECK(reader->stats().status.find("pread") != std::string::npos);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  CHECK_FALSE(OpenSource(*reader, b)->direct());
  CheckEveryEdge(*reader, b);
  UringReaderStats s = reader->stats();
  CHECK(s.uring_reads == 0);
  CHECK(s.pread_reads == s.reads);
}

TEST_CASE("UringSource: when io_uring setup is refused every read is a pread with the same bytes") {
  ScratchDir dir("/var/tmp");
  for (int err : {EPERM, ENOSYS}) {
    UringReaderOptions o = SmallOptions();
    o.TEST_setup_errno = err;
    auto reader = UringReader::Create(o);
    REQUIRE(reader);
    CHECK_FALSE(reader->uring_active());
    CHECK(reader->stats().status.find("io_uring unavailable") != std::string::npos);
    MESSAGE(reader->stats().status);
    BlockFixture b = WriteBlock(dir.path(), kPayload);
    CheckEveryEdge(*reader, b);
    CHECK(reader->stats().pread_reads == reader->stats().reads);
  }
}

TEST_CASE("UringSource: reading straight into aligned caller memory returns the same bytes") {
  ScratchDir dir("/var/tmp");
  UringReaderOptions o = SmallOptions();
  o.direct_into_out = true;
  auto reader = UringReader::Create(o);
  REQUIRE(reader);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  CheckEveryEdge(*reader, b);
  auto src = OpenSource(*reader, b);
  size_t len = 5 * 64 * 1024;
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(4096, len));
  REQUIRE(src->ReadRaw(4096, {raw, len}) == StatusCode::kOk);
  CHECK(std::equal(raw, raw + len, b.payload.begin() + 4096));
  std::free(raw);
}

// Drops the file's clean pages so the next read has to reach the device.
void EvictPageCache(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(::fdatasync(fd.get()) == 0);
  REQUIRE(::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED) == 0);
}

TEST_CASE("UringSource: page cache first serves cached pages and reads the rest from the device") {
  ScratchDir dir("/var/tmp");
  UringReaderOptions o = SmallOptions();
  o.page_cache_first = true;
  auto reader = UringReader::Create(o);
  REQUIRE(reader);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  CheckEveryEdge(*reader, b);  // just written: in the page cache
  UringReaderStats s = reader->stats();
  if (!s.uring) return;
  CHECK(s.page_cache_reads > 0);
  EvictPageCache(b.path);
  auto src = OpenSource(*reader, b);
  std::vector<uint8_t> got(kPayload);
  REQUIRE(src->ReadRaw(0, got) == StatusCode::kOk);
  CHECK(got == b.payload);
  CHECK(reader->stats().uring_reads > s.uring_reads);  // O_DIRECT does not fill the cache
}

TEST_CASE("UringReader: a pool with no free slot falls back to pread") {
  ScratchDir dir("/var/tmp");
  auto reader = UringReader::Create(SmallOptions());
  REQUIRE(reader);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  auto held = reader->pool().Checkout(reader->pool().slot_count(), {});
  REQUIRE(held.ok());
  auto src = OpenSource(*reader, b);
  std::vector<uint8_t> got(100000);
  REQUIRE(src->ReadRaw(777, got) == StatusCode::kOk);
  CHECK(std::equal(got.begin(), got.end(), b.payload.begin() + 777));
  for (const SlotLease& l : held.value()) CHECK(reader->pool().Release(l) == StatusCode::kOk);
}

// A pipe nobody writes to: a read that does not complete until the test says so.
struct StuckPipe {
  int fds[2] = {-1, -1};
  StuckPipe() { REQUIRE(::pipe2(fds, O_CLOEXEC) == 0); }
  ~StuckPipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 400 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

UringReaderOptions TimeoutOptions(bool skip_cancel) {
  UringReaderOptions o = SmallOptions();
  o.slots = 2;
  o.rings = 1;
  o.timeout_ns = 50'000'000;
  o.cancel_grace_ns = 20'000'000;
  o.TEST_skip_cancel = skip_cancel;
  return o;
}

TEST_CASE("UringReader: a timed-out read with no completion quarantines its slot") {
  auto reader = UringReader::Create(TimeoutOptions(true));
  REQUIRE(reader);
  if (!reader->uring_active()) {
    MESSAGE("io_uring unavailable here: " << reader->stats().status);
    return;
  }
  StuckPipe pipe;
  std::vector<uint8_t> out(100, 0xEE);
  CHECK(reader->Read({pipe.fds[0], -1}, 0, out) == StatusCode::kIoError);
  CHECK(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 0xEE; }));  // no bytes
  UringReaderStats s = reader->stats();
  CHECK(s.timeouts == 1);
  CHECK(s.pool.quarantined == 1);
  CHECK(s.pool.free == 1);
  // The quarantined slot is not handed out again.
  CHECK(reader->pool().Checkout(2, {}).status() == StatusCode::kExhausted);
  reader->Poll();
  CHECK(reader->stats().pool.quarantined == 1);
  // The completion finally arrives: its reaping attests the slot drained.
  std::string bytes(100, 'x');
  REQUIRE(::write(pipe.fds[1], bytes.data(), bytes.size()) == 100);
  CHECK(WaitFor([&] {
    reader->Poll();
    return reader->stats().pool.quarantined == 0;
  }));
  s = reader->stats();
  CHECK(s.late_completions == 1);
  CHECK(s.pool.attested == 1);
  CHECK(s.pool.free == 2);
}

TEST_CASE("UringReader: a quarantined slot comes back through fence and reclaim") {
  auto reader = UringReader::Create(TimeoutOptions(true));
  REQUIRE(reader);
  if (!reader->uring_active()) return;
  StuckPipe pipe;
  std::vector<uint8_t> out(100);
  CHECK(reader->Read({pipe.fds[0], -1}, 0, out) == StatusCode::kIoError);
  RegisteredPool& pool = reader->pool();
  REQUIRE(pool.Counters().quarantined == 1);
  uint64_t before = pool.epoch();
  CHECK(pool.ReclaimFenced(before).value() == 0);  // no fence: still quarantined
  CHECK(pool.Counters().quarantined == 1);
  uint64_t e = pool.FenceEpoch().value();
  CHECK(pool.ReclaimFenced(before).status() == StatusCode::kFenced);
  CHECK(pool.ReclaimFenced(e).value() == 1);
  CHECK(pool.Counters().free == 2);
  // The late completion names a retired lease: it must not free anything now.
  std::string bytes(100, 'x');
  REQUIRE(::write(pipe.fds[1], bytes.data(), bytes.size()) == 100);
  WaitFor([&] {
    reader->Poll();
    return reader->stats().late_completions == 1;
  });
  CHECK(pool.Counters().stale_refused >= 1);
  CHECK(pool.Counters().free == 2);
}

TEST_CASE("UringReader: a timed-out read whose cancellation completes frees its slot") {
  auto reader = UringReader::Create(TimeoutOptions(false));
  REQUIRE(reader);
  if (!reader->uring_active()) return;
  StuckPipe pipe;
  std::vector<uint8_t> out(100);
  CHECK(reader->Read({pipe.fds[0], -1}, 0, out) == StatusCode::kIoError);
  UringReaderStats s = reader->stats();
  CHECK(s.timeouts == 1);
  CHECK(s.pool.quarantined == 0);  // the completion (ECANCELED) is known
  CHECK(s.pool.free == 2);
}

TEST_CASE("UringReader: queue depth comes from the device or a constant") {
  size_t qd = QueueDepthFor("/var/tmp");
  CHECK(qd >= 8);
  CHECK(qd <= 64);
  CHECK(QueueDepthFor("/dev/shm") == 32);
  CHECK(QueueDepthFor("/no/such/dir") == 32);
}

TEST_CASE("UringReader: concurrent readers on shared rings return the file bytes") {
  ScratchDir dir("/var/tmp");
  UringReaderOptions o = SmallOptions();
  o.rings = 2;  // fewer rings than threads: some reads go through pread
  auto reader = UringReader::Create(o);
  REQUIRE(reader);
  BlockFixture b = WriteBlock(dir.path(), kPayload);
  auto src = OpenSource(*reader, b);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> got;
      for (int i = 0; i < 200; ++i) {
        uint64_t off = (uint64_t(i) * 7919 + t * 104729) % (kPayload - 1);
        uint64_t len = std::min<uint64_t>(kPayload - off, 1 + (i * 31337) % 300000);
        got.assign(len, 0);
        if (src->ReadRaw(off, got) != StatusCode::kOk ||
            !std::equal(got.begin(), got.end(), b.payload.begin() + off)) {
          bad++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
  CHECK(reader->stats().pool.free == reader->pool().slot_count());
}

}  // namespace
}  // namespace gpucache
