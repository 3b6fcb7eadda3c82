// The RAM tier through a real mount (adr/0020): a block read once is copied, verified, into the
// daemon's private tmpfs, and its next open is answered with FUSE passthrough, so the kernel
// reads the copy without asking the daemon. Damaged bytes are never copied; a block that leaves
// keeps serving the files already open on it and misses for new opens; `[ram] bytes = 0` and a
// tier smaller than the block serve every read from the daemon, as before.
//
// The daemon's own counters (.gpucache/metrics) say who served what: gpucache_block_reads_total
// counts the READs it answered, gpucache_ram_passthrough_opens_total the opens the kernel serves.
// Waits are for a state the daemon reports (a copy made, a RELEASE seen), never for a time.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "store/block_file.h"
#include "tests/mount/mount_helpers.h"
#include "tests/support/page_cache.h"

namespace gpucache {
namespace {

using namespace test;

std::string RamConfig(uint64_t bytes) {
  return "[ram]\nbytes = " + std::to_string(bytes) + "\n" + TestConfig();
}

const std::string kDaemonReads = "gpucache_block_reads_total{tenant=\"acme\"}";
const std::string kPassthroughOpens = "gpucache_ram_passthrough_opens_total";
const std::string kDaemonHandles = "gpucache_ram_open_handles{served_by=\"daemon\"}";
const std::string kKernelHandles = "gpucache_ram_open_handles{served_by=\"kernel\"}";

// Polls `cond` until it holds (false after 30 s: the state never came).
bool WaitUntil(const std::function<bool()>& cond) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

// The whole file from offset 0, or the errno of the first failed read.
std::variant<Bytes, int> ReadAll(int fd, size_t size) {
  Bytes out(size);
  size_t at = 0;
  while (at < size) {
    ssize_t n = ::pread(fd, out.data() + at, size - at, static_cast<off_t>(at));
    if (n < 0) return errno;
    if (n == 0) break;
    at += static_cast<size_t>(n);
  }
  out.resize(at);
  return out;
}

// Opens `path`, reads `size` bytes and closes it; the bytes read.
Bytes ReadAll(const std::string& path, size_t size) {
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  auto got = ReadAll(fd, size);
  ::close(fd);
  REQUIRE(std::holds_alternative<Bytes>(got));
  return std::get<Bytes>(got);
}

// Opens and reads the block whole, then makes the kernel forget the pages it cached for it, so
// the next read of the inode comes from the daemon or from passthrough, never from them.
void ReadOnceAndForgetPages(const std::string& path, const Bytes& payload) {
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  auto got = ReadAll(fd, payload.size());
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == payload);
  CHECK(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  ::close(fd);
}

// The block was copied and the open the daemon served is released: the next open may pass through.
bool Promoted(const MountedFs& m) {
  return Metric(m, "gpucache_ram_copies") == 1 && Metric(m, kDaemonHandles) == 0;
}

struct RamBlock {
  RamBlock(const MountedFs& m, size_t size, CacheIdentity block = SampleIdentity("acme"))
      : client(m.mnt()), id(std::move(block)) {
    payload = Payload(size, 9);
    REQUIRE(client.Commit(id, payload) == 0);
    path = client.PathOf(id);
    backing = m.data() + "/blocks/" + AddressOf(id).RelativePath();
  }
  MountClient client;
  CacheIdentity id;
  Bytes payload;
  std::string path, backing;
};

TEST_CASE("RAM tier: the second open of a block is served by the kernel from its verified copy") {
  MountedFs m(RamConfig(64 << 20));
  REQUIRE(Metric(m, "gpucache_ram_passthrough") == 1);
  RamBlock b(m, (4 << 20) + 123);
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Promoted(m); }));
  CHECK(Metric(m, "gpucache_ram_bytes") >= double(b.payload.size()));
  CHECK(Metric(m, "gpucache_ram_promotions_total") == 1);
  for (const char* reason : {"checksum", "io", "no_space", "left"}) {  // every series, from 0
    CHECK(Metric(m, std::string("gpucache_ram_promotion_failures_total{reason=\"") + reason + "\"}") == 0);
  }
  const double daemon_reads = Metric(m, kDaemonReads);
  REQUIRE(daemon_reads > 0);

  int fd = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  auto got = ReadAll(fd, b.payload.size() + 1);  // and past the end: EOF where the block ends
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);
  CHECK(Metric(m, kDaemonReads) == daemon_reads);  // no READ reached the daemon
  CHECK(Metric(m, kPassthroughOpens) == 1);
  CHECK(Metric(m, kKernelHandles) == 1);
  CHECK(Metric(m, "gpucache_ram_hits_total") == 1);
  // A second file on the same inode shares its backing file.
  int fd2 = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(fd2 >= 0);
  CHECK(Metric(m, kPassthroughOpens) == 2);
  CHECK(Metric(m, "gpucache_ram_backing_files") == 1);
  auto again = ReadAll(fd2, b.payload.size());
  REQUIRE(std::holds_alternative<Bytes>(again));
  CHECK(std::get<Bytes>(again) == b.payload);
  ::close(fd);
  ::close(fd2);
  // The last release closes the inode's backing file.
  CHECK(WaitUntil([&] { return Metric(m, kKernelHandles) == 0 && Metric(m, "gpucache_ram_backing_files") == 0; }));
  CHECK(Metric(m, kDaemonReads) == daemon_reads);
  // Opens go on counting as opens, whoever serves their reads.
  CHECK(Metric(m, "gpucache_block_opens_total{tenant=\"acme\"}") == 3);
}

std::string RamConfig(uint64_t bytes, const std::string& promote) {
  return "[ram]\nbytes = " + std::to_string(bytes) + "\npromote = \"" + promote + "\"\n" + TestConfig();
}

TEST_CASE("RAM tier: with promote = \"commit\" a committed block is copied at once, and its first open passes through") {
  MountedFs m(RamConfig(64 << 20, "commit"));
  REQUIRE(Metric(m, "gpucache_ram_passthrough") == 1);
  CHECK(m.Log().find("blocks copied on read and on commit") != std::string::npos);
  RamBlock b(m, (4 << 20) + 77);
  REQUIRE(WaitUntil([&] { return Promoted(m) && Metric(m, "gpucache_ram_promotions_pending") == 0; }));
  CHECK(Metric(m, "gpucache_ram_promotions_total") == 1);
  CHECK(Metric(m, kDaemonReads) <= 0);  // nobody read it: the copy came from the commit

  int fd = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  CHECK(Metric(m, kPassthroughOpens) == 1);
  auto got = ReadAll(fd, b.payload.size() + 1);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);
  CHECK(Metric(m, kDaemonReads) <= 0);  // the kernel read the verified copy
  ::close(fd);

  // A block committed again at the same address (after the first left) is copied again: the
  // old copy is never served for it.
  REQUIRE(::unlink(b.path.c_str()) == 0);
  CHECK(WaitUntil([&] { return Metric(m, "gpucache_ram_copies") == 0; }));
  Bytes second = Payload(b.payload.size(), 11);
  REQUIRE(b.client.Commit(b.id, second) == 0);
  REQUIRE(WaitUntil([&] { return Metric(m, "gpucache_ram_promotions_total") == 2 && Promoted(m); }));
  auto again = b.client.Read(b.id);
  REQUIRE(std::holds_alternative<Bytes>(again));
  CHECK(std::get<Bytes>(again) == second);
  CHECK(Metric(m, kDaemonReads) <= 0);
}

TEST_CASE("RAM tier: with promote = \"read\" (the default) a commit copies nothing") {
  MountedFs m(RamConfig(64 << 20, "read"));
  RamBlock b(m, 2 << 20);
  // The commit is done; were a copy queued, it would show as pending or made by the next stat.
  CHECK(Metric(m, "gpucache_ram_promotions_pending") == 0);
  CHECK(Metric(m, "gpucache_ram_copies") == 0);
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Promoted(m); }));
  CHECK(Metric(m, "gpucache_ram_promotions_total") == 1);
}

TEST_CASE("RAM tier: while an open the daemon serves is outstanding, new opens of the inode are its too") {
  MountedFs m(RamConfig(64 << 20));
  RamBlock b(m, 2 << 20);
  int first = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(first >= 0);
  REQUIRE(std::holds_alternative<Bytes>(ReadAll(first, b.payload.size())));
  // Another reader comes and goes: its release has the block copied while `first` is open.
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Metric(m, "gpucache_ram_copies") == 1; }));
  // The kernel would refuse (EIO) a passthrough open of an inode open in its page-cache mode.
  int second = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(second >= 0);
  auto got = ReadAll(second, b.payload.size());
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);
  CHECK(Metric(m, kPassthroughOpens) == 0);
  CHECK(Metric(m, kDaemonHandles) == 2);
  ::close(first);
  ::close(second);
  REQUIRE(WaitUntil([&] { return Metric(m, kDaemonHandles) == 0; }));
  int third = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(third >= 0);
  CHECK(Metric(m, kPassthroughOpens) == 1);
  auto third_got = ReadAll(third, b.payload.size());
  REQUIRE(std::holds_alternative<Bytes>(third_got));
  CHECK(std::get<Bytes>(third_got) == b.payload);
  ::close(third);
}

// Pages of the FUSE inode's own cache that back `fd` (a file the daemon serves), counted with
// mincore over a mapping of it; -1 if it cannot be mapped.
long CachedPages(int fd, size_t size) {
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> resident((size + page - 1) / page);
  long n = -1;
  if (::mincore(map, size, resident.data()) == 0) {
    n = std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; });
  }
  ::munmap(map, size);
  return n;
}

// Found by the bench: the first pass over blocks just copied ran at a quarter of the speed of
// the next, because each one's first passthrough open had to drop, inside the reader's open,
// the 4 KiB pages its daemon-served reads had left in the FUSE inode's cache (an open without
// keep_cache invalidates them); until then the block was held twice in memory. The daemon now
// has the kernel drop them once the block is copied, but never under a daemon-served open,
// whose READs may hold those pages (the drop would wait for them).
TEST_CASE("RAM tier: once a block is copied, the pages its daemon-served reads cached are dropped") {
  MountedFs m(RamConfig(64 << 20));
  const std::string drops = "gpucache_ram_page_drops_total";
  SUBCASE("read once: dropped as soon as the copy is made") {
    RamBlock b(m, 2 << 20);
    ReadAll(b.path, b.payload.size());
    CHECK(WaitUntil([&] { return Metric(m, drops) == 1; }));
    CHECK(Metric(m, "gpucache_ram_copies") == 1);
  }
  SUBCASE("copied while another file reads it: kept until that file closes") {
    RamBlock b(m, 2 << 20);
    int first = ::open(b.path.c_str(), O_RDONLY);  // served by the daemon: it sees the FUSE cache
    REQUIRE(first >= 0);
    REQUIRE(std::holds_alternative<Bytes>(ReadAll(first, b.payload.size())));
    const long pages = static_cast<long>(b.payload.size() / ::sysconf(_SC_PAGESIZE));
    REQUIRE(CachedPages(first, b.payload.size()) == pages);
    // Another reader comes and goes: its release has the block copied.
    ReadAll(b.path, b.payload.size());
    REQUIRE(WaitUntil([&] { return Metric(m, "gpucache_ram_copies") == 1; }));
    REQUIRE(WaitUntil([&] { return Metric(m, "gpucache_ram_promotions_pending") == 0; }));
    CHECK(Metric(m, drops) == 0);
    CHECK(CachedPages(first, b.payload.size()) == pages);
    ::close(first);
    CHECK(WaitUntil([&] { return Metric(m, drops) == 1; }));
  }
}

TEST_CASE("RAM tier: a block damaged on disk is never copied: EIO as without the tier, nothing in RAM") {
  MountedFs m(RamConfig(64 << 20));
  RamBlock b(m, 1 << 20);
  int fd = ::open(b.backing.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t byte = static_cast<uint8_t>(b.payload[500000] ^ 0x01);
  REQUIRE(::pwrite(fd, &byte, 1, kBlockDataOffset + 500000) == 1);
  ::close(fd);
  REQUIRE(EvictFile(b.backing));
  auto got = b.client.Read(b.id);
  REQUIRE(std::holds_alternative<int>(got));
  CHECK(std::get<int>(got) == EIO);
  REQUIRE(WaitUntil([&] { return Metric(m, "gpucache_ram_promotions_pending") == 0; }));
  CHECK(Metric(m, "gpucache_ram_copies") == 0);
  CHECK(Metric(m, "gpucache_ram_bytes") == 0);
  CHECK(Metric(m, "gpucache_ram_promotions_total") == 0);
  // It left the namespace as corrupt: a clean miss from now on, RAM tier or not.
  auto after = b.client.Read(b.id);
  REQUIRE(std::holds_alternative<int>(after));
  CHECK(std::get<int>(after) == ENOENT);
  CHECK(Metric(m, kPassthroughOpens) == 0);
}

// Opens the block by passthrough (after one read served by the daemon), then `leave` takes it
// out of the namespace. The file keeps reading the bytes it opened; a new open misses.
void LeaveWhileOpen(const std::function<void(const MountedFs&, const RamBlock&)>& leave) {
  MountedFs m(RamConfig(64 << 20));
  RamBlock b(m, 4 << 20);
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Promoted(m); }));
  int fd = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(Metric(m, kPassthroughOpens) == 1);
  const double daemon_reads = Metric(m, kDaemonReads);
  leave(m, b);
  CHECK(Metric(m, "gpucache_ram_copies") == 0);  // new opens never find the copy
  CHECK(Metric(m, "gpucache_ram_forgotten_total") == 1);
  // The handle still holds the store's reader: the block is quarantined, not freed.
  CHECK(ReadText(m.mnt() + "/.gpucache/quarantine").find(AddressOf(b.id).block) != std::string::npos);
  auto got = ReadAll(fd, b.payload.size());
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);
  CHECK(Metric(m, kDaemonReads) == daemon_reads);  // served by the kernel from the copy
  CHECK(Errno(::open(b.path.c_str(), O_RDONLY)) == ENOENT);
  ::close(fd);
  CHECK(WaitUntil([&] { return Metric(m, "gpucache_ram_backing_files") == 0; }));
}

TEST_CASE("RAM tier: a block evicted while open by passthrough keeps serving that file, new opens miss") {
  LeaveWhileOpen([](const MountedFs& m, const RamBlock& b) {
    std::string reply = Control(m, "{\"op\":\"evict\",\"path\":\"" + AddressOf(b.id).RelativePath() + "\"}");
    CHECK(reply.find("\"ok\":true") != std::string::npos);
  });
}

TEST_CASE("RAM tier: a block unlinked while open by passthrough keeps serving that file, new opens miss") {
  LeaveWhileOpen([](const MountedFs&, const RamBlock& b) { CHECK(::unlink(b.path.c_str()) == 0); });
}

TEST_CASE("RAM tier: another tenant's caller is refused a block held in RAM, as on disk") {
  MountedFs m(RamConfig(64 << 20));
  RamBlock b(m, 1 << 20);
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Promoted(m); }));
  CHECK(AsUser(2000, 2000, [&] { return Errno(::open(b.path.c_str(), O_RDONLY)); }) == EACCES);
  CHECK(Metric(m, kPassthroughOpens) == 0);
}

TEST_CASE("RAM tier: [ram] bytes = 0 serves every read from the daemon, as without the tier") {
  MountedFs m(RamConfig(0));
  RamBlock b(m, 2 << 20);
  ReadOnceAndForgetPages(b.path, b.payload);
  CHECK(m.Log().find("RAM tier: off ([ram] bytes = 0)") != std::string::npos);
  CHECK(Metric(m, "gpucache_ram_passthrough") == 0);
  CHECK(Metric(m, "gpucache_ram_budget_bytes") == 0);
  const double daemon_reads = Metric(m, kDaemonReads);
  auto got = b.client.Read(b.id);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);
  CHECK(Metric(m, kDaemonReads) > daemon_reads);
  CHECK(Metric(m, kPassthroughOpens) == 0);
  CHECK(Metric(m, "gpucache_ram_copies") == 0);
}

TEST_CASE("RAM tier: a tier smaller than a block never holds it") {
  MountedFs m(RamConfig(1 << 20));
  RamBlock b(m, 4 << 20);
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] {
    return Metric(m, "gpucache_ram_too_large_total") == 1 && Metric(m, "gpucache_ram_promotions_pending") == 0;
  }));
  CHECK(Metric(m, "gpucache_ram_copies") == 0);
  const double daemon_reads = Metric(m, kDaemonReads);
  auto got = b.client.Read(b.id);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);
  CHECK(Metric(m, kDaemonReads) > daemon_reads);
  CHECK(Metric(m, kPassthroughOpens) == 0);
}

// Regression (review, 2026-12-07), the reviewer's own run: opens sharing a block's backing file
// never refreshed its copy in the tier, so a block always held open by overlapping readers (a
// shared prompt prefix) aged to the LRU end and was the first evicted; evicting a copy still
// open freed no tmpfs page, and the next copy's fallocate failed (no_space). The block held
// open must stay, the least recently used other one go, and the new copy be made.
TEST_CASE("RAM tier: a block held open by passthrough and opened again is not the one evicted for room") {
  const size_t size = 3 << 20;
  MountedFs m(RamConfig(7340032));  // two copies of 3 MiB, not three
  RamBlock a(m, size, SampleBlock(1)), b(m, size, SampleBlock(2)), c(m, size, SampleBlock(3));
  ReadOnceAndForgetPages(a.path, a.payload);
  REQUIRE(WaitUntil([&] { return Promoted(m); }));
  int held = ::open(a.path.c_str(), O_RDONLY);
  REQUIRE(held >= 0);
  REQUIRE(Metric(m, kPassthroughOpens) == 1);
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Metric(m, "gpucache_ram_copies") == 2 && Metric(m, kDaemonHandles) == 0; }));
  for (int i = 0; i < 50; ++i) ::close(::open(a.path.c_str(), O_RDONLY));
  REQUIRE(Metric(m, kPassthroughOpens) == 51);
  ReadOnceAndForgetPages(c.path, c.payload);
  REQUIRE(WaitUntil([&] {
    return Metric(m, "gpucache_ram_promotions_pending") == 0 && Metric(m, kDaemonHandles) == 0 &&
           Metric(m, "gpucache_ram_promotions_total") + Metric(m, "gpucache_ram_promotion_failures_total{reason=\"no_space\"}") == 3;
  }));
  CHECK(Metric(m, "gpucache_ram_promotion_failures_total{reason=\"no_space\"}") == 0);
  CHECK(Metric(m, "gpucache_ram_promotions_total") == 3);
  CHECK(Metric(m, "gpucache_ram_copies") == 2);
  CHECK(Metric(m, "gpucache_ram_evictions_total") == 1);
  CHECK(Metric(m, "gpucache_ram_hits_total") == 51);
  // A and C pass through; B, the least recently used, was the one evicted.
  const double daemon_reads = Metric(m, kDaemonReads);
  CHECK(ReadAll(a.path, size) == a.payload);
  CHECK(ReadAll(c.path, size) == c.payload);
  CHECK(Metric(m, kPassthroughOpens) == 53);
  CHECK(Metric(m, kDaemonReads) == daemon_reads);
  CHECK(ReadAll(b.path, size) == b.payload);
  CHECK(Metric(m, kDaemonReads) > daemon_reads);
  ::close(held);
}

// docs/reliability.md, "RAM tier": a passthrough file reads its backing file without the daemon,
// so a daemon that dies does not end it: it keeps reading the verified copy (the tmpfs lives
// while it is open), while everything that asks the daemon fails with ENOTCONN.
TEST_CASE("RAM tier: a passthrough file held when the daemon is killed keeps reading its copy, new opens get ENOTCONN") {
  MountedFs m(RamConfig(64 << 20));
  RamBlock b(m, 3000000, SampleBlock(1));
  ReadOnceAndForgetPages(b.path, b.payload);
  REQUIRE(WaitUntil([&] { return Promoted(m); }));
  int fd = ::open(b.path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(Metric(m, kPassthroughOpens) == 1);
  // Files of other blocks served by the daemon: one read whole (its inode's pages cached: opens
  // are answered with keep_cache), one whose first page alone was read (no readahead).
  RamBlock whole(m, 1 << 20, SampleBlock(2)), part(m, 1 << 20, SampleBlock(3));
  int whole_fd = ::open(whole.path.c_str(), O_RDONLY), part_fd = ::open(part.path.c_str(), O_RDONLY);
  REQUIRE(whole_fd >= 0);
  REQUIRE(part_fd >= 0);
  REQUIRE(std::holds_alternative<Bytes>(ReadAll(whole_fd, whole.payload.size())));
  REQUIRE(::posix_fadvise(part_fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  REQUIRE(::posix_fadvise(part_fd, 0, 0, POSIX_FADV_RANDOM) == 0);
  Bytes page(4096);
  REQUIRE(::pread(part_fd, page.data(), page.size(), 0) == ssize_t(page.size()));

  REQUIRE(::kill(m.pid(), SIGKILL) == 0);
  CHECK(WaitUntil([&] {
    int probe = ::open(part.path.c_str(), O_RDONLY);
    if (probe >= 0) ::close(probe);
    return probe < 0 && errno == ENOTCONN;
  }));
  CHECK(Errno(::open(b.path.c_str(), O_RDONLY)) == ENOTCONN);
  auto got = ReadAll(fd, b.payload.size() + 1);
  REQUIRE(std::holds_alternative<Bytes>(got));
  CHECK(std::get<Bytes>(got) == b.payload);  // every byte, from the verified copy
  auto whole_got = ReadAll(whole_fd, whole.payload.size());
  REQUIRE(std::holds_alternative<Bytes>(whole_got));
  CHECK(std::get<Bytes>(whole_got) == whole.payload);  // from its cached pages
  Bytes again(4096);
  CHECK(::pread(part_fd, again.data(), again.size(), 0) == ssize_t(again.size()));
  CHECK(again == Bytes(part.payload.begin(), part.payload.begin() + 4096));
  CHECK(Errno(::pread(part_fd, again.data(), again.size(), (1 << 20) - 4096)) == ENOTCONN);  // not cached
  ::close(fd);
  ::close(whole_fd);
  ::close(part_fd);
  m.Kill();  // reaps the daemon and unmounts the dead mount
}

}  // namespace
}  // namespace gpucache
