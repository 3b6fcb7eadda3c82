#include "store/index_snapshot.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/file_store.h"
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

void Commit(FileStore& s, int k) {
  BlockAddress a = AddressOf(Key(k));
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  Bytes gpck = EncodePhysicalKey(Key(k));
  REQUIRE(s.SetIdentity(r.value(), gpck) == StatusCode::kOk);
  REQUIRE(s.Write(r.value(), 0, test::Payload(5000 + k, static_cast<uint8_t>(k))).ok());
  REQUIRE(s.Commit(r.value()) == StatusCode::kOk);
}

std::unique_ptr<FileStore> Open(const std::string& dir, FileStoreReport& report) {
  std::string error;
  auto s = FileStore::OpenDataDir(dir, {}, &report, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

Bytes ReadAll(FileStore& s, int k) {
  auto r = s.Open(AddressOf(Key(k)));
  if (!r.ok()) return {};
  Bytes out(r.value()->info().size);
  auto n = r.value()->Read(0, out);
  return n.ok() ? out : Bytes{};
}

}  // namespace

TEST_CASE("Index snapshot: encode then decode, and every truncation or flip refused") {
  SnapshotEntry e{"acme/ns/0123", EncodePhysicalKey(Key(1)), 5, 2, 9, 1000, 1001, 77,
                  "00112233445566778899aabbccddeeff", 12345, 70000, 1700000000, 5};
  Bytes b = EncodeSnapshot({e, e});
  auto d = DecodeSnapshot(b);
  REQUIRE(d);
  CHECK(d->size() == 2);
  CHECK((*d)[1] == e);
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
  CHECK_FALSE(std::filesystem::exists(tmp.path() + "/INDEX"));  // used once
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

}  // namespace gpucache
