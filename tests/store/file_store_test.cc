#include "store/file_store.h"

#include <doctest/doctest.h>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "store/memory_store.h"
#include "tests/support/commit_block.h"
#include "tests/support/fault_env.h"
#include "tests/support/gate.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmpfs.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

std::unique_ptr<IndexedStore> OpenStore(const std::string& dir, FileStoreReport* report = nullptr) {
  std::string error;
  auto s = OpenFileStore(dir, {}, report, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

void Commit(IndexedStore& s, const CacheIdentity& id, const Bytes& payload) {
  test::CommitBlock(s, id, payload, kOwner);
}

Result<Bytes> ReadBack(IndexedStore& s, const CacheIdentity& id) {
  auto reader = s.Open(AddressOf(id));
  if (!reader.ok()) return reader.status();
  Bytes out(reader.value()->info().size);
  auto n = reader.value()->Read(0, out);
  if (!n.ok()) return n.status();
  return out;
}

void FlipByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t b;
  REQUIRE(::pread(fd, &b, 1, offset) == 1);
  b ^= 0x40;
  REQUIRE(::pwrite(fd, &b, 1, offset) == 1);
  ::close(fd);
}

TEST_CASE("FileStore: restart reloads committed blocks, bumps the epoch, drops reservations") {
  test::TempDir tmp;
  std::string dir = tmp.path() + "/data";
  CacheIdentity a = SampleIdentity("acme", 4), b = SampleIdentity("acme", 16);
  Bytes pa = Payload(1000, 1), pb = Payload(300000, 2);
  uint64_t epoch_before;
  {
    auto s = OpenStore(dir);
    epoch_before = s->Epoch();
    Commit(*s, a, pa);
    Commit(*s, b, pb);
    auto r = s->Reserve(AddressOf(SampleIdentity("acme", 8)), kOwner);
    REQUIRE(r.ok());
    REQUIRE(s->Write(r.value(), 0, Payload(10)).ok());
    // Destroyed without Abort: a crash, as far as the data directory can tell.
  }
  FileStoreReport report;
  auto s = OpenStore(dir, &report);
  CHECK(report.epoch == epoch_before + 1);
  CHECK(s->Epoch() == epoch_before + 1);
  CHECK(report.blocks_loaded == 2);
  CHECK(report.reservations_dropped == 1);
  CHECK(ReadBack(*s, a).value() == pa);
  CHECK(ReadBack(*s, b).value() == pb);
  CHECK(s->FindReservation(AddressOf(SampleIdentity("acme", 8))) == std::nullopt);
  CHECK(s->Stat(AddressOf(b))->owner == kOwner);
  CHECK(fs::is_empty(dir + "/tmp"));
  // Region ids are never recycled: the new epoch's ids are above every loaded one.
  auto r = s->Reserve(AddressOf(SampleIdentity("acme", 8)), kOwner);
  CHECK(s->StatReservation(r.value())->region_id > s->Stat(AddressOf(b))->region_id);
}

TEST_CASE("FileStore: a second daemon on the same directory is refused") {
  test::TempDir tmp;
  auto s = OpenStore(tmp.path());
  std::string error;
  CHECK(OpenFileStore(tmp.path(), {}, nullptr, &error) == nullptr);
  CHECK(error.find("in use") != std::string::npos);
}

TEST_CASE("FileStore: corrupt or truncated block files are skipped at restart") {
  test::TempDir tmp;
  // Distinct parents, so that none of them is a prefix hit for another.
  auto with_parent = [](uint8_t seed) {
    CacheIdentity id = SampleIdentity("acme", 4);
    id.chain[0] = test::Hash(seed);
    return id;
  };
  CacheIdentity good = with_parent(100), bad_header = with_parent(101), truncated = with_parent(102),
                moved = with_parent(103);
  std::string header_path, truncated_path, moved_path;
  {
    auto s = OpenStore(tmp.path());
    for (const auto& id : {good, bad_header, truncated, moved}) Commit(*s, id, Payload(5000));
    header_path = s->BackingPath(AddressOf(bad_header));
    truncated_path = s->BackingPath(AddressOf(truncated));
    moved_path = s->BackingPath(AddressOf(moved));
  }
  FlipByte(header_path, 100);
  fs::resize_file(truncated_path, fs::file_size(truncated_path) - 1);
  // A block file copied over another block's name: its identity no longer matches its path.
  fs::copy_file(header_path + "", moved_path, fs::copy_options::overwrite_existing);
  FileStoreReport report;
  auto s = OpenStore(tmp.path(), &report);
  CHECK(report.blocks_loaded == 1);
  CHECK(report.blocks_skipped == 3);
  CHECK(report.problems.size() == 3);
  CHECK(s->Lookup(good).kind == LookupResult::Kind::kHit);
  for (const auto& id : {bad_header, truncated, moved}) {
    CHECK(s->Lookup(id).kind == LookupResult::Kind::kMiss);
  }
  CHECK_FALSE(fs::exists(truncated_path));
  // Kept for examination, not deleted: the start moved them to damaged/.
  size_t kept = 0;
  for (const auto& e : fs::directory_iterator(tmp.path() + "/damaged")) {
    std::string name = e.path().filename().string();
    kept += name.ends_with(AddressOf(truncated).block) || name.ends_with(AddressOf(bad_header).block) ||
            name.ends_with(AddressOf(moved).block);
  }
  CHECK(kept == 3);
}

TEST_CASE("FileStore: damaged files a start sets aside are bounded to the newest kMaxDamaged") {
  test::TempDir tmp;
  std::string ns_dir;
  {
    auto s = OpenStore(tmp.path());
    Commit(*s, SampleIdentity("acme", 1), Payload(1000));
    std::string path = s->BackingPath(AddressOf(SampleIdentity("acme", 1)));
    ns_dir = path.substr(0, path.find_last_of('/'));
  }
  // Files with block names that no index entry names and no header makes sense of.
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 25; i++) {
      CacheIdentity id = SampleIdentity("acme", static_cast<uint8_t>(50 + i));
      std::ofstream(ns_dir + "/" + AddressOf(id).block) << "not a block " << round;
    }
    FileStoreReport report;
    auto s = OpenStore(tmp.path(), &report);
    s->WaitForVerification();
  }
  size_t kept = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path() + "/damaged")) kept++;
  CHECK(kept == FileMedium::kMaxDamaged);  // 50 found, the newest 32 kept
}

// The files in <dir>/damaged/ (named by when they were found, then the block's name).
std::vector<std::string> DamagedFiles(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir + "/damaged")) return out;
  for (const auto& e : fs::directory_iterator(dir + "/damaged")) out.push_back(e.path().string());
  return out;
}

TEST_CASE("FileStore: payload corruption is found on read, counted, becomes a miss, and its file is kept") {
  test::TempDir tmp;
  auto s = OpenStore(tmp.path());
  CacheIdentity id = SampleIdentity();
  Commit(*s, id, Payload(200000));
  std::string path = s->BackingPath(AddressOf(id));
  std::string detail;
  s->SetRemovalObserver([&](const BlockAddress&, RemovalReason why, std::string_view d) {
    CHECK(why == RemovalReason::kCorrupt);
    detail = d;
  });
  FlipByte(path, kBlockDataOffset + 199999);
  CHECK(ReadBack(*s, id).status() == StatusCode::kChecksumMismatch);
  CHECK(s->Stats().tenants["acme"].checksum_failures == 1);
  CHECK(s->Lookup(id).kind == LookupResult::Kind::kMiss);
  CHECK_FALSE(fs::exists(path));
  // Moved to damaged/ for examination, and the operator's log line says which chunk failed
  // and where the file went (the data directory is in both paths).
  std::vector<std::string> kept = DamagedFiles(tmp.path());
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].ends_with("-" + AddressOf(id).block));
  CHECK(fs::file_size(kept[0]) == kBlockDataOffset + 200000);
  CHECK(detail == "chunk 3 (bytes 196608-199999); " + path + " moved to " + kept[0]);
  s->SetRemovalObserver(nullptr);
  // Gone from the index for good: the next start does not find it again.
  s.reset();
  FileStoreReport report;
  s = OpenStore(tmp.path(), &report);
  CHECK(report.blocks_loaded == 0);
  CHECK(s->Lookup(id).kind == LookupResult::Kind::kMiss);
}

TEST_CASE("FileStore: a block file replaced on disk while indexed is never served") {
  test::TempDir tmp;
  auto s = OpenStore(tmp.path());
  CacheIdentity a = SampleIdentity("acme", 2), b = SampleIdentity("acme", 3);
  Commit(*s, a, Payload(5000, 1));
  Commit(*s, b, Payload(5000, 2));
  fs::copy_file(s->BackingPath(AddressOf(b)), s->BackingPath(AddressOf(a)),
                fs::copy_options::overwrite_existing);
  CHECK(ReadBack(*s, a).status() == StatusCode::kChecksumMismatch);
  CHECK(s->Lookup(a).kind == LookupResult::Kind::kMiss);
  CHECK(ReadBack(*s, b).ok());
}

// Rewrites the header of `a`'s file in place (same file, region and length) to name `b`.
void RewriteIdentity(IndexedStore& s, const CacheIdentity& a, const CacheIdentity& b) {
  std::string path = s.BackingPath(AddressOf(a));
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  Result<BlockHeader> header = ReadBlockHeader(fd);
  REQUIRE(header.ok());
  header->identity = EncodePhysicalKey(b);
  Bytes encoded = EncodeBlockHeader(header.value());
  REQUIRE(encoded.size() <= kBlockDataOffset);
  REQUIRE(::pwrite(fd, encoded.data(), encoded.size(), 0) == ssize_t(encoded.size()));
  ::close(fd);
}

// The index keeps no digest of a block's identity: Open and Stat check that the header's
// identity names the block's address. A header rewritten in place (same file, same region and
// length) with another block's identity is refused by both, and the block leaves.
TEST_CASE("FileStore: a header naming another block is never served") {
  test::TempDir tmp;
  auto s = OpenStore(tmp.path());
  CacheIdentity a = SampleIdentity("acme", 2), b = SampleIdentity("acme", 3);
  Commit(*s, a, Payload(5000, 1));
  Commit(*s, b, Payload(5000, 2));
  RewriteIdentity(*s, a, b);
  CHECK(s->StatAttributes(AddressOf(a)).ok());  // memory alone cannot tell
  CHECK(s->Stat(AddressOf(a)).status() == StatusCode::kNotFound);
  CHECK(s->StatAttributes(AddressOf(a)).status() == StatusCode::kNotFound);
  CHECK(s->Lookup(a).kind == LookupResult::Kind::kMiss);
  CHECK(ReadBack(*s, b).ok());
}

TEST_CASE("FileStore: a header naming another block is refused by Open") {
  test::TempDir tmp;
  auto s = OpenStore(tmp.path());
  CacheIdentity a = SampleIdentity("acme", 2), b = SampleIdentity("acme", 3);
  Commit(*s, a, Payload(5000, 1));
  Commit(*s, b, Payload(5000, 2));
  RewriteIdentity(*s, a, b);
  CHECK(ReadBack(*s, a).status() == StatusCode::kChecksumMismatch);
  CHECK(s->Lookup(a).kind == LookupResult::Kind::kMiss);
  CHECK(s->Stats().tenants["acme"].checksum_failures == 1);
  std::vector<std::string> kept = DamagedFiles(tmp.path());
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].ends_with("-" + AddressOf(a).block));
}

// A block committed and held open by a reader, then invalidated (so quarantined) while the
// medium's rename into quarantine/ fails, and with `unlink_fails` the unlink that replaces it.
struct FailedQuarantine {
  test::TempDir dir;
  test::FaultEnv env;
  StoreOptions options;
  std::unique_ptr<IndexedStore> s;
  CacheIdentity id = SampleIdentity("acme", 16);
  uint64_t region = 0;

  explicit FailedQuarantine(bool unlink_fails) {
    options.env = &env;
    Reopen();
    Commit(*s, id, Payload(5000, 1));
    auto reader = s->Open(AddressOf(id));
    REQUIRE(reader.ok());
    region = reader.value()->info().region_id;
    env.FailNext(test::FaultEnv::Op::kRename, test::FaultEnv::Fault::kIoError);
    if (unlink_fails) env.FailNext(test::FaultEnv::Op::kRemove, test::FaultEnv::Fault::kIoError);
    // Open: quarantined. Left under its name, the block would come back at a start: EIO.
    REQUIRE(s->Invalidate(AddressOf(id)) == (unlink_fails ? StatusCode::kIoError : StatusCode::kOk));
  }
  void Reopen() {
    s.reset();
    std::string error;
    s = OpenFileStore(dir.path(), options, nullptr, &error);
    REQUIRE_MESSAGE(s, error);
  }
};

// Regression (review, 2026-12-06): when the rename of an open block into quarantine/ failed,
// the file was unlinked but the quarantine entry kept the block's live name; a new commit at
// that address then renamed its file there, and the reclaim removed it: the index listed a
// block whose file was gone. And (stop 41's note, left open) when the unlink failed too, the
// reclaim removed whatever file was under the name by then.
TEST_CASE("FileStore: a quarantine whose rename (and unlink) failed never reclaims the name's next block") {
  for (bool unlink_fails : {false, true}) {
    CAPTURE(unlink_fails);
    FailedQuarantine q(unlink_fails);
    Commit(*q.s, q.id, Payload(5000, 2));  // the same address again: its file takes the name
    REQUIRE(q.s->ReclaimDrained(q.region) == StatusCode::kOk);  // its reader closed at once
    Result<Bytes> back = ReadBack(*q.s, q.id);
    REQUIRE(back.ok());
    CHECK(back.value() == Payload(5000, 2));
    q.Reopen();  // and the next start still finds it
    back = ReadBack(*q.s, q.id);
    REQUIRE(back.ok());
    CHECK(back.value() == Payload(5000, 2));
  }
}

TEST_CASE("FileStore: a quarantine whose rename and unlink failed is removed by reclaim if still there") {
  FailedQuarantine q(/*unlink_fails=*/true);
  REQUIRE(q.s->ReclaimDrained(q.region) == StatusCode::kOk);
  q.Reopen();
  CHECK(ReadBack(*q.s, q.id).status() == StatusCode::kNotFound);  // not indexed again
}

// Holds the rename of a block file into quarantine/ until Release (the window between the
// store naming a block quarantined and the medium moving its bytes there).
class HeldQuarantineEnv final : public EnvWrapper {
 public:
  StatusCode Rename(const std::string& from, const std::string& to) override {
    if (to.find("/quarantine/") != std::string::npos) gate.Hold();
    return EnvWrapper::Rename(from, to);
  }
  void WaitHeld() { gate.WaitHeld(); }
  void Release() { gate.Release(); }
  test::Gate gate;
};

// Regression (review, 2026-12-06): a reclaim that came while the medium was still moving a
// quarantined block's file took the entry with the block's live location: it removed the live
// name (or found it gone), and the file the move then put in quarantine/ was left, uncounted
// and back as a "restart" quarantine at the next start; or the move failed and counted a false
// medium error.
TEST_CASE("FileStore: a reclaim waits for the quarantine's move of the bytes") {
  test::TempDir dir;
  HeldQuarantineEnv env;
  StoreOptions options;
  options.env = &env;
  std::string error;
  auto s = OpenFileStore(dir.path(), options, nullptr, &error);
  REQUIRE(s);
  CacheIdentity id = SampleIdentity("acme", 16);
  Commit(*s, id, Payload(5000, 1));
  auto reader = s->Open(AddressOf(id));
  REQUIRE(reader.ok());
  uint64_t region = reader.value()->info().region_id;
  std::thread invalidate([&] { CHECK(s->Invalidate(AddressOf(id)) == StatusCode::kOk); });
  env.WaitHeld();
  reader.value().reset();  // its reader closed: drained, but its bytes are still moving
  CHECK(s->ReclaimDrained(region) == StatusCode::kBusy);
  REQUIRE(s->Fence().ok());
  CHECK(s->ReclaimFenced(s->Epoch()).value() == 0);  // not taken while moving either
  env.Release();
  invalidate.join();
  CHECK(s->ReclaimDrained(region) == StatusCode::kOk);
  CHECK(s->Stats().medium_errors == 0);
  CHECK(std::filesystem::is_empty(dir.path() + "/quarantine"));
}

TEST_CASE("FileStore: the block file is self-describing") {
  test::TempDir tmp;
  auto s = OpenStore(tmp.path());
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(70000);
  Commit(*s, id, payload);
  int fd = ::open(s->BackingPath(AddressOf(id)).c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  auto header = ReadBlockHeader(fd);
  ::close(fd);
  REQUIRE(header.ok());
  CHECK(header->identity == EncodePhysicalKey(id));
  CHECK(header->payload_length == payload.size());
  CHECK(header->checksums.chunks.size() == 2);
  CHECK("xxh3-128:" + header->checksums.digest_hex == s->Stat(AddressOf(id))->checksum);
  CHECK(fs::file_size(s->BackingPath(AddressOf(id))) == kBlockDataOffset + payload.size());
}

// The metrics and the daemon's log see a store's reads only through Medium::IoStats: it must
// say which path serves them and, with io_uring, count every read (whether the ring or its
// pread fallback served it: the uring reader counts both).
TEST_CASE("FileStore: IoStats names the pread path, or gives the io_uring reader's counters") {
  test::TempDir tmp;
  CacheIdentity id = SampleIdentity();
  {
    auto s = OpenStore(tmp.path());
    Commit(*s, id, Payload(5000));
    MediumIoStats posix = s->medium().IoStats();
    CHECK(posix.description.starts_with("posix"));
    CHECK_FALSE(posix.uring.has_value());
  }
  StoreOptions options;
  options.backing_io = "uring";
  std::string error;
  auto s = OpenFileStore(tmp.path(), options, nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  MediumIoStats before = s->medium().IoStats();
  REQUIRE(before.uring.has_value());
  CHECK(before.description == before.uring->status);
  REQUIRE(ReadBack(*s, id).ok());
  MediumIoStats after = s->medium().IoStats();
  REQUIRE(after.uring.has_value());
  CHECK(after.uring->reads > before.uring->reads);
}

TEST_CASE("MemoryStore: IoStats has no io_uring counters") {
  MemoryStore s;
  MediumIoStats stats = s.medium().IoStats();
  CHECK_FALSE(stats.uring.has_value());
  CHECK_FALSE(stats.description.empty());
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

CacheIdentity Numbered(uint8_t n) {
  CacheIdentity id = test::SampleIdentity("acme", 16);
  id.chain[0] = test::Hash(n);
  return id;
}

TEST_CASE("FileStore: new blocks go to data directories in proportion to their free bytes") {
  test::TempDir tmp;
  test::Tmpfs small(tmp.path() + "/small", "16m"), large(tmp.path() + "/large", "48m");
  REQUIRE_MESSAGE((small.mounted() && large.mounted()), "cannot mount tmpfs (the tests run as root)");
  std::string error;
  StoreOptions defaults;
  auto s = OpenFileStore({small.path(), large.path()}, defaults, nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  std::map<std::string, int> per_dir;
  for (uint32_t i = 0; i < 400; ++i) {
    CacheIdentity id = SampleIdentity("acme");
    for (int b = 0; b < 4; ++b) id.chain[0][b] = static_cast<uint8_t>(i >> (8 * b));
    Commit(*s, id, Payload(100, 1));
    std::string path = s->BackingPath(AddressOf(id));
    per_dir[path.substr(0, path.find("/blocks/"))]++;
  }
  // Free bytes 16 MiB : 48 MiB, so about a quarter and three quarters.
  CHECK(per_dir[small.path()] == doctest::Approx(100).epsilon(0.3));
  CHECK(per_dir[large.path()] == doctest::Approx(300).epsilon(0.12));
}

TEST_CASE("FileStore: blocks spread over several data directories, isolating one makes its blocks misses") {
  test::TempDir tmp;
  std::vector<std::string> dirs = {tmp.path() + "/d0", tmp.path() + "/d1", tmp.path() + "/d2"};
  std::string error;
  StoreOptions defaults;
  {
    auto s = OpenFileStore(dirs, defaults, nullptr, &error);
    REQUIRE_MESSAGE(s, error);
    for (uint8_t i = 0; i < 30; ++i) Commit(*s, Numbered(i), Payload(100, i));
  }
  FileStoreReport report;
  auto s = OpenFileStore(dirs, defaults, &report, &error);
  REQUIRE(s);
  CHECK(report.blocks_loaded == 30);
  std::map<std::string, int> per_dir;
  for (uint8_t i = 0; i < 30; ++i) {
    std::string path = s->BackingPath(AddressOf(Numbered(i)));
    CHECK(fs::exists(path));
    per_dir[path.substr(0, path.find("/blocks/"))]++;
  }
  CHECK(per_dir.size() == 3);  // every directory holds some
  int in_d1 = per_dir[dirs[1]];
  CHECK(s->IsolateDomain(tmp.path() + "/nope") == StatusCode::kNotFound);
  REQUIRE(s->IsolateDomain(dirs[1]) == StatusCode::kOk);
  CHECK(s->Stats().tenants["acme"].usage.blocks == uint64_t(30 - in_d1));
  for (uint8_t i = 30; i < 60; ++i) {
    Commit(*s, Numbered(i), Payload(100, i));
    CHECK(s->BackingPath(AddressOf(Numbered(i))).rfind(dirs[1], 0) != 0);  // never placed there
  }
  REQUIRE(s->IsolateDomain(dirs[0]) == StatusCode::kOk);
  CHECK(s->IsolateDomain(dirs[2]) == StatusCode::kInvalidArgument);  // never the last one
  CHECK(s->Domains().size() == 3);
  CHECK(s->Domains()[1].isolated);
  CHECK_FALSE(s->Domains()[2].isolated);
}

// Regression (review, 2026-12-06): rmdir removed the namespace from the index, then its
// directory from every data directory, isolated ones included, where the isolated blocks still
// were: ENOTEMPTY for the caller, and the namespace gone from listings all the same. Isolated
// directories are out of service for removal as for creation (CreateNamespace skips them).
TEST_CASE("FileStore: removing a namespace leaves an isolated directory's blocks alone, and succeeds") {
  test::TempDir tmp;
  std::vector<std::string> dirs = {tmp.path() + "/d0", tmp.path() + "/d1"};
  std::string error;
  auto s = OpenFileStore(dirs, {}, nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  std::vector<BlockAddress> in_d0;
  std::string isolated_file;
  for (uint8_t i = 0; i < 40; ++i) {
    Commit(*s, Numbered(i), Payload(100, i));
    std::string path = s->BackingPath(AddressOf(Numbered(i)));
    if (path.rfind(dirs[0], 0) == 0) in_d0.push_back(AddressOf(Numbered(i)));
    else isolated_file = path;
  }
  REQUIRE_FALSE(in_d0.empty());
  REQUIRE_FALSE(isolated_file.empty());
  REQUIRE(s->IsolateDomain(dirs[1]) == StatusCode::kOk);
  for (const BlockAddress& a : in_d0) REQUIRE(s->Evict(a) == StatusCode::kOk);
  const BlockAddress a = AddressOf(Numbered(0));
  CHECK(s->RemoveNamespace(a.tenant, a.ns) == StatusCode::kOk);
  CHECK_FALSE(fs::exists(DataDir(dirs[0]).Namespace(a.tenant, a.ns)));
  CHECK(fs::exists(isolated_file));  // out of service: left as it was
  CHECK(s->RemoveNamespace(a.tenant, a.ns) == StatusCode::kNotFound);
}

// The same block in two data directories (a copy by hand, a directory moved back): a start keeps
// one, the first readable one in the order of the directories, and reports the other.
TEST_CASE("FileStore: a block found in two data directories is loaded once, from a readable copy") {
  for (bool first_damaged : {false, true}) {
    CAPTURE(first_damaged);
    test::TempDir tmp;
    std::vector<std::string> dirs = {tmp.path() + "/d0", tmp.path() + "/d1"};
    std::string error;
    std::string relative;
    {
      auto s = OpenFileStore(dirs, {}, nullptr, &error);
      REQUIRE_MESSAGE(s, error);
      Commit(*s, Numbered(7), Payload(100, 7));
      std::string path = s->BackingPath(AddressOf(Numbered(7)));
      relative = path.substr(path.find("/blocks/"));
    }
    for (const std::string& d : dirs) {
      if (fs::exists(d + relative)) continue;
      std::string other = d == dirs[0] ? dirs[1] : dirs[0];
      fs::create_directories(fs::path(d + relative).parent_path());
      fs::copy_file(other + relative, d + relative);
    }
    if (first_damaged) FlipByte(dirs[0] + relative, 0);  // its header
    FileStoreReport report;
    auto s = OpenFileStore(dirs, {}, &report, &error);
    REQUIRE_MESSAGE(s, error);
    CHECK(report.blocks_loaded == 1);
    CHECK(report.blocks_skipped == 1);
    REQUIRE(report.problems.size() == 1);
    CHECK(report.problems[0].find(first_damaged ? "corrupt" : "a duplicate") != std::string::npos);
    CHECK(ReadBack(*s, Numbered(7)).value() == Payload(100, 7));
    CHECK(s->BackingPath(AddressOf(Numbered(7))) == (first_damaged ? dirs[1] : dirs[0]) + relative);
    // Regression (review, 2026-12-06): the copy not loaded stayed under its name, uncounted;
    // once the loaded one was invalidated, the next start brought the block back.
    CHECK_FALSE(fs::exists((first_damaged ? dirs[0] : dirs[1]) + relative));
    REQUIRE(s->Invalidate(AddressOf(Numbered(7))) == StatusCode::kOk);
    s.reset();
    s = OpenFileStore(dirs, {}, nullptr, &error);
    REQUIRE_MESSAGE(s, error);
    CHECK(ReadBack(*s, Numbered(7)).status() == StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace gpucache
