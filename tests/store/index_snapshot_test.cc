#include "store/index_snapshot.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>

#include "store/index_journal.h"

#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "store/codec.h"
#include "store/file_store.h"
#include "tests/support/commit_block.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

constexpr Owner kOwner{1000, 1000};

CacheIdentity Key(int k) {
  CacheIdentity id = test::SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(k));
  return id;
}

void Commit(IndexedStore& s, int k) {
  test::CommitBlock(s, Key(k), test::Payload(5000 + k, static_cast<uint8_t>(k)), kOwner);
}

std::unique_ptr<IndexedStore> Open(const std::string& dir, FileStoreReport& report) {
  std::string error;
  auto s = OpenFileStore(dir, {}, &report, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

Bytes ReadAll(IndexedStore& s, int k) {
  auto r = s.Open(AddressOf(Key(k)));
  if (!r.ok()) return {};
  Bytes out(r.value()->info().size);
  auto n = r.value()->Read(0, out);
  return n.ok() ? out : Bytes{};
}

}  // namespace

TEST_CASE("Index snapshot: encode then decode, and every truncation or flip refused") {
  SnapshotEntry e{1, *ParseBlockName("00112233445566778899aabbccddeeff"), 5, 2, 9, 1000, 1001, 77,
                  *ParseBlockName("8899aabbccddeeff0011223344556677"),
                  IndexKeysOf(Key(1), EncodePhysicalKey(Key(1))), 12345, 70000, 1700000000, 5};
  IndexSnapshot snapshot{{"acme/ns-00000000000000000000000000000000", "beta/ns-00000000000000000000000000000000"}, {e, e}};
  snapshot.entries[0].ns = 0;
  Bytes b = EncodeSnapshot(snapshot);
  auto d = DecodeSnapshot(b);
  REQUIRE(d);
  CHECK(*d == snapshot);
  CHECK(d->entries[1] == e);
  snapshot.entries[0].ns = 2;  // no such namespace
  CHECK_FALSE(DecodeSnapshot(EncodeSnapshot(snapshot)));
  for (size_t n = 0; n < b.size(); n++) {
    CHECK_FALSE(DecodeSnapshot(std::span(b).first(n)));
    Bytes flipped = b;
    flipped[n] ^= 0x20;
    CHECK_FALSE(DecodeSnapshot(flipped));
  }
}

TEST_CASE("Index snapshot: a clean close lets the next start skip reading headers") {
  test::TempDir tmp;
  FileStoreReport report;
  {
    auto s = Open(tmp.path(), report);
    for (int k = 0; k < 20; k++) Commit(*s, k);
  }
  CHECK(std::filesystem::exists(tmp.path() + "/INDEX"));
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  CHECK(second.blocks_loaded == 20);
  CHECK(second.from_snapshot == 20);
  // Written anew from what this start verified: a crash from here on replays the journal over
  // it instead of reading every header.
  CHECK(std::filesystem::exists(tmp.path() + "/INDEX"));
  for (int k = 0; k < 20; k++) {
    CHECK(ReadAll(*s, k) == test::Payload(5000 + k, static_cast<uint8_t>(k)));
    CHECK(s->Lookup(Key(k)).kind == LookupResult::Kind::kHit);
  }
}

TEST_CASE("Index snapshot: a file changed while the daemon was down is read in full") {
  test::TempDir tmp;
  FileStoreReport report;
  std::string damaged_path, swapped_path;
  {
    auto s = Open(tmp.path(), report);
    for (int k = 0; k < 3; k++) Commit(*s, k);
    damaged_path = tmp.path() + "/blocks/" + AddressOf(Key(0)).RelativePath();
    swapped_path = tmp.path() + "/blocks/" + AddressOf(Key(2)).RelativePath();
  }
  // A header byte damaged in place (same inode and size, new ctime) ...
  int fd = ::open(damaged_path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, "X", 1, 40) == 1);
  ::close(fd);
  // ... and another block's file copied over a name (a new inode).
  std::string other = tmp.path() + "/blocks/" + AddressOf(Key(1)).RelativePath();
  std::filesystem::copy_file(other, swapped_path, std::filesystem::copy_options::overwrite_existing);
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  CHECK(second.from_snapshot == 1);   // only the untouched block
  CHECK(second.blocks_skipped == 2);  // both caught at start, as without a snapshot
  CHECK_FALSE(s->Stat(AddressOf(Key(0))).ok());
  CHECK_FALSE(s->Stat(AddressOf(Key(2))).ok());
  CHECK(ReadAll(*s, 1) == test::Payload(5001, 1));
}

TEST_CASE("Index snapshot: a damaged or planted snapshot only costs a full scan") {
  test::TempDir tmp;
  FileStoreReport report;
  {
    auto s = Open(tmp.path(), report);
    Commit(*s, 0);
  }
  {
    std::fstream f(tmp.path() + "/INDEX", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x7f');
  }
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  CHECK(second.from_snapshot == 0);
  CHECK(second.blocks_loaded == 1);
  CHECK(ReadAll(*s, 0) == test::Payload(5000, 0));
}

// An INDEX with a valid checksum whose entry count is as large as its byte length, with
// zeros after it: "GPCX", version 3, no namespaces, `count`.
void PlantCountingIndex(const std::string& path, uint64_t count) {
  ByteWriter w;
  w.Raw(std::string_view("GPCX"));
  w.U32(3);
  w.U32(0);
  w.U64(count);
  w.bytes().resize(w.bytes().size() + count);
  uint64_t sum = XXH3_64bits(w.bytes().data(), w.bytes().size());
  w.U64(sum);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(w.bytes().data()), static_cast<std::streamsize>(w.bytes().size()));
}

// Runs `fn` in a child whose address space may grow by `headroom` bytes at most (an
// allocation past it throws, as on a machine that lacks the memory), and returns its exit
// status: kThrew if `fn` threw, -1 if the child died.
constexpr int kThrew = 100;
int InCappedChild(uint64_t headroom, const std::function<int()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    uint64_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    uint64_t cap = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + headroom;
    rlimit limit{cap, cap};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(kThrew + 1);
    int code = kThrew;
    try {
      code = fn();
    } catch (...) {
    }
    ::_exit(code);  // never back into the test runner, which would go on in the child
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Regression (review, 2026-12-06): an entry count was bounded by the INDEX's byte length, not by
// the entries those bytes could hold; a planted INDEX with a valid checksum had the start reserve
// an entry's memory per byte of it, throw bad_alloc, and the daemon die at every start.
TEST_CASE("Index snapshot: a count more than its bytes could hold costs one scan, never the start") {
  test::TempDir tmp;
  FileStoreReport report;
  {
    auto s = Open(tmp.path(), report);
    Commit(*s, 0);
  }
  // 8 Mi entries would take more than a GiB in memory; the child may take 256 MiB.
  PlantCountingIndex(tmp.path() + "/INDEX", uint64_t{8} << 20);
  int status = InCappedChild(uint64_t{256} << 20, [&] {
    FileStoreReport second;
    std::string error;
    auto s = OpenFileStore(tmp.path(), {}, &second, &error);
    if (!s) return 1;
    return second.from_snapshot == 0 && second.blocks_loaded == 1 && ReadAll(*s, 0) == test::Payload(5000, 0) ? 0 : 2;
  });
  CHECK(status == 0);
}

TEST_CASE("Index snapshot: lookups after a restart, from the snapshot or the files, answer as before it") {
  test::TempDir tmp;
  FileStoreReport report;
  CacheIdentity half = test::SampleIdentity("acme", 8);
  CacheIdentity other_dtype = test::SampleIdentity("acme", 16);
  other_dtype.kv_dtype = "fp16";
  auto commit = [](IndexedStore& s, const CacheIdentity& id) {
    BlockAddress a = AddressOf(id);
    s.CreateNamespace(a.tenant, a.ns, kOwner);
    auto r = s.Reserve(a, kOwner);
    REQUIRE(r.ok());
    REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
    REQUIRE(s.Write(r.value(), 0, test::Payload(4096)).ok());
    REQUIRE(s.Commit(r.value()) == StatusCode::kOk);
  };
  {
    auto s = Open(tmp.path(), report);
    commit(*s, half);
    commit(*s, other_dtype);
  }
  bool from_files = false;
  SUBCASE("from the snapshot") {}
  SUBCASE("from the block files' headers alone (their keys come from ReadBlockInfo)") {
    from_files = true;
    std::filesystem::remove(tmp.path() + "/INDEX");
    std::filesystem::remove(tmp.path() + "/JOURNAL");
  }
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  REQUIRE(second.blocks_loaded == 2);
  REQUIRE(second.from_snapshot == (from_files ? 0u : 2u));
  CHECK(s->Lookup(half).kind == LookupResult::Kind::kHit);
  LookupResult full = s->Lookup(test::SampleIdentity("acme", 16));
  CHECK(full.kind == LookupResult::Kind::kPrefixHit);
  CHECK(full.address == AddressOf(half));
  CHECK(full.valid_length == 128);
  CHECK(s->Lookup(test::SampleIdentity("acme", 4)).kind == LookupResult::Kind::kMiss);
  CacheIdentity other_parent = test::SampleIdentity("acme", 16);
  other_parent.chain[0] = test::Hash(99);
  CHECK(s->Lookup(other_parent).kind == LookupResult::Kind::kMiss);
  // Same logical key as other_dtype, another physical one.
  other_dtype.quant_format = "fp8";
  LookupResult miss = s->Lookup(other_dtype);
  CHECK(miss.kind == LookupResult::Kind::kMiss);
  CHECK(miss.reason == MissReason::kIncompatible);
  // Stat still tells the whole identity, read back from the block file.
  auto info = s->Stat(AddressOf(half));
  REQUIRE(info.ok());
  CHECK(info->identity == half);
  CHECK(info->canonical_identity == EncodePhysicalKey(half));
  CHECK(info->checksum.rfind("xxh3-128:", 0) == 0);
  auto attrs = s->StatAttributes(AddressOf(half));
  REQUIRE(attrs.ok());
  CHECK(attrs->identity.chain.empty());
  CHECK(attrs->checksum.empty());  // the index keeps no payload checksum
  CHECK(attrs->size == info->size);
  CHECK(attrs->region_id == info->region_id);
}

TEST_CASE("Index snapshot: a version-1 snapshot is refused and costs one scan") {
  test::TempDir tmp;
  FileStoreReport report;
  {
    auto s = Open(tmp.path(), report);
    Commit(*s, 0);
  }
  {
    std::fstream f(tmp.path() + "/INDEX", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put('\x01');
  }
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  CHECK(second.from_snapshot == 0);
  CHECK(second.blocks_loaded == 1);
}

// The snapshot at `path` rewritten as `version` (its trailing XXH3-64 recomputed).
void RewriteVersion(const std::string& path, uint32_t version) {
  std::ifstream in(path, std::ios::binary);
  Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 16);
  for (int i = 0; i < 4; i++) bytes[4 + i] = static_cast<uint8_t>(version >> (8 * i));
  uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);
  for (int i = 0; i < 8; i++) bytes[bytes.size() - 8 + i] = static_cast<uint8_t>(sum >> (8 * i));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Version 3 is version 2's layout with keys.identity and the payload digest allowed to be
// zeros: a version-2 snapshot (written while the index kept both) is still read in full, and
// a version from the future is refused.
TEST_CASE("Index snapshot: version 2 is read as 3, a later version costs one scan") {
  for (uint32_t version : {2u, 3u, 4u}) {
    CAPTURE(version);
    test::TempDir tmp;
    FileStoreReport report;
    {
      auto s = Open(tmp.path(), report);
      for (int k = 0; k < 3; k++) Commit(*s, k);
    }
    RewriteVersion(tmp.path() + "/INDEX", version);
    FileStoreReport second;
    auto s = Open(tmp.path(), second);
    CHECK(second.blocks_loaded == 3);
    CHECK(second.from_snapshot == (version <= 3 ? 3 : 0));
    for (int k = 0; k < 3; k++) {
      CHECK(ReadAll(*s, k) == test::Payload(5000 + k, static_cast<uint8_t>(k)));
      auto info = s->Stat(AddressOf(Key(k)));
      REQUIRE(info.ok());
      CHECK(info->checksum == "xxh3-128:" + ComputeChecksums(test::Payload(5000 + k, static_cast<uint8_t>(k))).digest_hex);
    }
  }
}

TEST_CASE("Index snapshot: a header damaged in place after a restart from it is never served") {
  // The snapshot's keys are trusted at start (no header is read), so Stat and Open must catch
  // a block file whose identity no longer reads back.
  test::TempDir tmp;
  FileStoreReport report;
  std::string path;
  {
    auto s = Open(tmp.path(), report);
    Commit(*s, 0);
    path = s->BackingPath(AddressOf(Key(0)));
  }
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  REQUIRE(second.from_snapshot == 1);
  // A byte of the identity's model name, inside the header.
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string head(4096, '\0');
  f.read(head.data(), head.size());
  size_t at = head.find("Llama");
  REQUIRE(at != std::string::npos);
  f.seekp(static_cast<std::streamoff>(at));
  f.put('X');
  f.close();
  CHECK_FALSE(s->Stat(AddressOf(Key(0))).ok());
  CHECK(s->Lookup(Key(0)).kind == LookupResult::Kind::kMiss);
  CHECK(ReadAll(*s, 0).empty());
}

TEST_CASE("Index keys: a chain's prefix digest matches the shorter block's") {
  CacheIdentity full = test::SampleIdentity("acme", 16), half = test::SampleIdentity("acme", 8);
  IndexKeys k = IndexKeysOf(half, EncodePhysicalKey(half));
  CHECK(k.chain_length == 9);
  CHECK(ChainDigest(full, k.chain_length) == k.prefix);
  CacheIdentity mm = full;
  mm.multimodal = Multimodal{"proc", test::Hash(5)};
  CHECK(ChainDigest(mm, k.chain_length) != k.prefix);
  BlockAddress a = AddressOf(full);
  auto digest = ParseBlockName(a.block);
  REQUIRE(digest);
  CHECK(FormatBlockName(*digest) == a.block);
  CHECK_FALSE(ParseBlockName("0123"));
  CHECK_FALSE(ParseBlockName(std::string(32, 'A')));
}

TEST_CASE("Index keys: a block name is exactly 32 lowercase hex digits, and any other byte anywhere is refused") {
  const std::string good = "0123456789abcdef0123456789abcdef";
  REQUIRE(ParseBlockName(good));
  CHECK((*ParseBlockName(good))[0] == 0x01);
  CHECK((*ParseBlockName(good))[7] == 0xef);
  for (size_t at : {size_t{0}, size_t{1}, size_t{16}, size_t{31}}) {
    for (int c = 0; c < 256; ++c) {
      std::string name = good;
      name[at] = static_cast<char>(c);
      bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
      CHECK_MESSAGE(ParseBlockName(name).has_value() == digit, "byte ", c, " at ", at);
    }
  }
}

}  // namespace gpucache

namespace gpucache {
namespace {

// Runs `fn` in a child process that then dies without closing anything: a crash (SIGKILL) as
// far as the data directory can tell. Returns the child's exit status.
int InCrashingChild(const std::function<void()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    fn();
    ::_exit(0);  // no destructors: the store never closes
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("Index journal: a start after a crash replays it and skips reading headers") {
  test::TempDir tmp;
  {
    FileStoreReport report;
    auto s = Open(tmp.path(), report);
    for (int k = 0; k < 10; k++) Commit(*s, k);
  }  // a clean close: INDEX holds 10
  REQUIRE(InCrashingChild([&] {
            FileStoreReport report;
            std::string error;
            auto s = OpenFileStore(tmp.path(), {}, &report, &error).release();  // never closed
            if (!s) ::_exit(1);
            for (int k = 10; k < 30; k++) Commit(*s, k);
            if (s->Invalidate(AddressOf(Key(3))) != StatusCode::kOk) ::_exit(2);
            if (s->Evict(AddressOf(Key(12))) != StatusCode::kOk) ::_exit(3);
          }) == 0);
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  CHECK(second.blocks_loaded == 28);
  CHECK(second.from_snapshot == 28);  // INDEX and the journal knew every one
  CHECK(second.blocks_skipped == 0);
  for (int k = 0; k < 30; k++) {
    CAPTURE(k);
    bool gone = k == 3 || k == 12;
    CHECK(ReadAll(*s, k) == (gone ? Bytes{} : test::Payload(5000 + k, static_cast<uint8_t>(k))));
  }
}

TEST_CASE("Index journal: a torn last record ends the replay, and a missing entry is read in full") {
  test::TempDir tmp;
  REQUIRE(InCrashingChild([&] {
            FileStoreReport report;
            std::string error;
            auto s = OpenFileStore(tmp.path(), {}, &report, &error).release();
            if (!s) ::_exit(1);
            for (int k = 0; k < 5; k++) Commit(*s, k);
          }) == 0);
  // The last record loses its last bytes, as in a power cut mid-append.
  std::string journal = tmp.path() + "/JOURNAL";
  auto size = std::filesystem::file_size(journal);
  REQUIRE(size > 10);
  std::filesystem::resize_file(journal, size - 10);
  FileStoreReport second;
  auto s = Open(tmp.path(), second);
  CHECK(second.blocks_loaded == 5);
  CHECK(second.from_snapshot == 4);  // the fifth was read from its header
  for (int k = 0; k < 5; k++) CHECK(ReadAll(*s, k) == test::Payload(5000 + k, static_cast<uint8_t>(k)));
}

TEST_CASE("Index journal: records round-trip, a damaged one ends the decoding, replay applies in order") {
  SnapshotEntry e{0, *ParseBlockName("00112233445566778899aabbccddeeff"), 5, 2, 9, 1000, 1001, 77,
                  *ParseBlockName("8899aabbccddeeff0011223344556677"),
                  IndexKeysOf(Key(1), EncodePhysicalKey(Key(1))), 12345, 70000, 1700000000, 5};
  JournalRecord add{false, "acme/ns-00000000000000000000000000000000", e};
  JournalRecord drop{true, "acme/ns-00000000000000000000000000000000", {}};
  drop.entry.block = e.block;
  Bytes bytes = EncodeJournalRecord(add);
  Bytes second = EncodeJournalRecord(drop);
  bytes.insert(bytes.end(), second.begin(), second.end());
  std::vector<JournalRecord> got = DecodeJournal(bytes);
  REQUIRE(got.size() == 2);
  CHECK(got[0].entry == e);
  CHECK(got[1].removal);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Bytes flipped = bytes;
    flipped[n] ^= 0x01;
    CHECK(DecodeJournal(flipped).size() < 2);
  }
  IndexSnapshot snapshot;
  ApplyJournal(snapshot, {add});
  REQUIRE(snapshot.entries.size() == 1);
  CHECK(snapshot.namespaces == std::vector<std::string>{"acme/ns-00000000000000000000000000000000"});
  ApplyJournal(snapshot, {drop});
  CHECK(snapshot.entries.empty());
  ApplyJournal(snapshot, {add, drop, add});
  CHECK(snapshot.entries.size() == 1);
}

// Review of stop 44: the replay took any bytes as a record's namespace (a planted journal could
// name thousands, each looked up by a walk of all before it: 80,000 took 4.5 s) and kept them
// as index names. A namespace that is no valid "tenant/namespace" now ends the replay there,
// as a damaged record does.
TEST_CASE("Index journal: a record whose namespace is not a valid tenant/namespace ends the replay") {
  const std::string good = "acme/ns-00000000000000000000000000000000";
  for (const char* bad : {"acme/ns", "../etc/ns-00000000000000000000000000000000", "acme",
                          "acme/ns-00000000000000000000000000000000/x", "/ns-00000000000000000000000000000000"}) {
    CAPTURE(bad);
    SnapshotEntry e;
    e.block[0] = 1;
    IndexSnapshot snapshot;
    JournalReplay replay(snapshot);
    Bytes bytes = EncodeJournalRecord({false, good, e});
    e.block[0] = 2;
    Bytes second = EncodeJournalRecord({false, bad, e});
    Bytes third = EncodeJournalRecord({false, good, e});
    bytes.insert(bytes.end(), second.begin(), second.end());
    bytes.insert(bytes.end(), third.begin(), third.end());
    CHECK(replay.Add(bytes) == bytes.size() - second.size() - third.size());
    CHECK(replay.records() == 1);
    CHECK(snapshot.namespaces == std::vector<std::string>{good});
  }
}

// The replay applies records through a hash table of entry indexes (EntryTable), not a sort: the
// result must be what applying the records one by one to a map says, whatever the order,
// however often a block comes and goes, with duplicates in INDEX itself, over several rehashes.
TEST_CASE("Index journal: the replay's table agrees with a record-by-record model") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    IndexSnapshot snapshot;
    snapshot.namespaces = {"acme/a-00000000000000000000000000000000", "acme/b-00000000000000000000000000000000"};
    std::map<std::pair<uint32_t, BlockDigest>, SnapshotEntry> model;
    auto block_of = [&](uint64_t k) {
      BlockDigest b{};
      b[0] = static_cast<uint8_t>(k);
      b[15] = static_cast<uint8_t>(k >> 8);  // few distinct blocks: many collide and repeat
      return b;
    };
    size_t base = rng() % 300;
    for (size_t i = 0; i < base; ++i) {
      SnapshotEntry e;
      e.ns = static_cast<uint32_t>(rng() % 2);
      e.block = block_of(rng() % 200);
      e.size = rng();
      snapshot.entries.push_back(e);
      model[{e.ns, e.block}] = e;  // a later INDEX entry of the same block wins
    }
    std::vector<JournalRecord> records;
    const char* names[] = {"acme/a-00000000000000000000000000000000", "acme/b-00000000000000000000000000000000", "acme/c-00000000000000000000000000000000"};
    for (size_t i = 0, n = rng() % 2000; i < n; ++i) {
      JournalRecord r;
      uint32_t ns = static_cast<uint32_t>(rng() % 3);
      r.ns = names[ns];
      r.removal = rng() % 3 == 0;
      r.entry.block = block_of(rng() % 200);
      r.entry.size = rng();
      r.entry.keys.chain_length = 1;
      records.push_back(r);
      SnapshotEntry e = r.entry;
      e.ns = ns;
      if (r.removal) {
        model.erase({ns, e.block});
      } else {
        model[{ns, e.block}] = e;
      }
    }
    ApplyJournal(snapshot, records);
    std::vector<SnapshotEntry> want;
    for (auto& [key, e] : model) want.push_back(e);
    REQUIRE(snapshot.entries.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(snapshot.entries[i] == want[i]);
  }
}

TEST_CASE("Index journal: an entry table finds, replaces and drops by (namespace, block)") {
  std::vector<SnapshotEntry> entries(3);
  entries[0].block[0] = 1;
  entries[1].block[0] = 1;  // the same block as entry 0: replaces it
  entries[2].ns = 1;
  entries[2].block[0] = 1;  // another namespace
  EntryTable table;
  CHECK(table.Find(entries, 0, entries[0].block) == EntryTable::kNone);
  table.Drop(entries, 0, entries[0].block);  // nothing to drop: no harm
  for (uint32_t i = 0; i < 3; ++i) table.Put(entries, i);
  CHECK(table.live() == 2);
  CHECK(table.Find(entries, 0, entries[0].block) == 1);
  CHECK(table.Find(entries, 1, entries[0].block) == 2);
  table.Drop(entries, 0, entries[0].block);
  CHECK(table.live() == 1);
  CHECK(table.Find(entries, 0, entries[0].block) == EntryTable::kNone);
  table.Put(entries, 0);  // committed again
  CHECK(table.Find(entries, 0, entries[0].block) == 0);
  table.Put(entries, 7);  // past the array: ignored, never looked up
  CHECK(table.live() == 2);
}

// A start restores INDEX's blocks in a pass over the live entries; in slot (hash) order each
// entry was a cache miss, a third of a start over 1,000,000 blocks.
TEST_CASE("Index journal: the live entries are visited in the order they sit in memory") {
  std::vector<SnapshotEntry> entries(5000);
  for (uint32_t i = 0; i < entries.size(); ++i) {
    entries[i].block[0] = static_cast<uint8_t>(i);
    entries[i].block[1] = static_cast<uint8_t>(i >> 8);
  }
  EntryTable table;
  for (uint32_t i = 0; i < entries.size(); ++i) table.Put(entries, i);
  for (uint32_t i = 0; i < entries.size(); i += 3) table.Drop(entries, 0, entries[i].block);
  std::vector<uint32_t> seen;
  table.ForEachLive(entries, [&](uint32_t i) { seen.push_back(i); });
  CHECK(seen.size() == table.live());
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  for (uint32_t i : seen) CHECK(i % 3 != 0);
}

}  // namespace
}  // namespace gpucache
