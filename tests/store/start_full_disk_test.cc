// A start on a data directory whose filesystem is full: what the start frees itself (a fill a
// crash cut off) makes room for EPOCH, which it must write before anything else.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "store/file_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmpfs.h"

namespace gpucache {
namespace {

constexpr Owner kOwner{1000, 1000};

// Writes `path` until the filesystem is full; the bytes written.
uint64_t FillWith(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  std::vector<char> chunk(64 * 1024, 'x');
  uint64_t written = 0;
  for (;;) {
    ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n <= 0) break;
    written += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return written;
}

}  // namespace

// Review (2026-12-07): a daemon killed while a writer filled the disk with a `.part` did not
// start again ("cannot write the epoch ... refusing to start"): the start dropped the leftover
// only after writing EPOCH, which needed a block the leftover held.
TEST_CASE("FileStore start: a full disk of a crashed fill's leftovers is freed before EPOCH is written") {
  test::TempDir tmp;
  test::Tmpfs small(tmp.path() + "/small", "2m");
  REQUIRE_MESSAGE(small.mounted(), "cannot mount tmpfs (the tests run as root)");
  std::string error;
  StoreOptions options;
  options.min_free_percent = 0;
  CacheIdentity id = test::SampleIdentity("acme");
  const Bytes payload = test::Payload(4096, 7);
  {
    auto s = OpenFileStore({small.path()}, options, nullptr, &error);
    REQUIRE_MESSAGE(s, error);
    BlockAddress a = AddressOf(id);
    s->CreateNamespace(a.tenant, a.ns, kOwner);
    auto r = s->Reserve(a, kOwner);
    REQUIRE(r.ok());
    REQUIRE(s->SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
    REQUIRE(s->Write(r.value(), 0, payload).ok());
    REQUIRE(s->Commit(r.value()) == StatusCode::kOk);
  }
  // What a crash in mid-fill leaves: a numbered .part in tmp/ as large as the disk allows.
  const std::string part = small.path() + "/tmp/4294967298.part";
  REQUIRE(FillWith(part) > 0);
  REQUIRE(small.FreeBytes() < 4096);
  FileStoreReport report;
  auto s = OpenFileStore({small.path()}, options, &report, &error);
  REQUIRE_MESSAGE(s, error);
  CHECK(report.reservations_dropped == 1);
  CHECK_FALSE(std::filesystem::exists(part));
  auto open = s->Open(AddressOf(id));
  REQUIRE(open.ok());
  Bytes out(payload.size());
  REQUIRE(open.value()->Read(0, out).ok());
  CHECK(out == payload);
}

}  // namespace gpucache
