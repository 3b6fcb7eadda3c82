// The commit path of FileStore: checksums computed as the payload arrives (ArrivalHasher,
// store/checksum.h) with the read-back wherever they cannot be, and the spare files that
// reservations take instead of creating one (store/spare_pool.h).
#include <doctest/doctest.h>
#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/env.h"
#include "store/file_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

CacheIdentity Key(int k) {
  CacheIdentity id = SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(k % 250), 16 + k / 250);
  return id;
}

// The POSIX Env, counting the payload bytes read back.
class CountingEnv final : public EnvWrapper {
 public:
  uint64_t read_bytes = 0;
  StatusCode Read(int fd, std::span<uint8_t> out, uint64_t offset) override {
    read_bytes += out.size();
    return EnvWrapper::Read(fd, out, offset);
  }
};

// A FileStore over one directory, through `env` (null: POSIX), and its medium.
struct Opened {
  std::unique_ptr<IndexedStore> store;
  FileMedium* medium = nullptr;
};

Opened Open(const std::string& dir, Env* env) {
  StoreOptions options;
  options.env = env;
  std::string error;
  Opened o{OpenFileStore(dir, options, nullptr, &error)};
  REQUIRE_MESSAGE(o.store, error);
  o.medium = &static_cast<FileMedium&>(o.store->medium());
  return o;
}

ReservationId Reserve(IndexedStore& s, const CacheIdentity& id) {
  BlockAddress a = AddressOf(id);
  auto ns = s.CreateNamespace(a.tenant, a.ns, kOwner);
  REQUIRE((ns == StatusCode::kOk || ns == StatusCode::kExists));
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(id)) == StatusCode::kOk);
  return r.value();
}

void Write(IndexedStore& s, ReservationId r, uint64_t offset, std::span<const uint8_t> data) {
  REQUIRE(s.Write(r, offset, data).value() == data.size());
}

Bytes ReadBack(IndexedStore& s, const CacheIdentity& id) {
  auto reader = s.Open(AddressOf(id));
  REQUIRE(reader.ok());
  Bytes out(reader.value()->info().size);
  REQUIRE(reader.value()->Read(0, out).ok());
  return out;
}

// The committed checksum names the payload (XXH3-128 over all of it).
void CheckDigest(IndexedStore& s, const CacheIdentity& id, const Bytes& payload) {
  CHECK(s.Stat(AddressOf(id))->checksum == "xxh3-128:" + ComputeChecksums(payload).digest_hex);
  CHECK(ReadBack(s, id) == payload);  // every chunk verified on the way
}

std::span<const uint8_t> Slice(const Bytes& b, size_t from, size_t len) { return {b.data() + from, len}; }

TEST_CASE("ArrivalHasher: in-order pieces give the checksums of the whole payload") {
  Bytes payload = Payload(300000, 3);
  ArrivalHasher h;
  for (size_t at = 0; at < payload.size(); at += 70001) {
    size_t len = std::min<size_t>(70001, payload.size() - at);
    h.EndWrite(h.Begin(), at, Slice(payload, at, len), true);
  }
  CHECK(h.hashed() == payload.size());
  uint64_t hashed = 0;
  auto hasher = h.Take(kDefaultChunkSize, &hashed);
  CHECK(hashed == payload.size());
  CHECK(hasher->Finish() == ComputeChecksums(payload));
  CHECK(h.hashed() == 0);  // taken: starts over
}

TEST_CASE("ArrivalHasher: gaps, overwrites, shrinks, failures and overlapping writes are not fed") {
  Bytes payload = Payload(200000, 4);
  ArrivalHasher h;
  h.EndWrite(h.Begin(), 0, Slice(payload, 0, 1000), true);
  h.EndWrite(h.Begin(), 5000, Slice(payload, 5000, 1000), true);  // a gap: left to the read-back
  CHECK(h.hashed() == 1000);
  h.EndWrite(h.Begin(), 1000, Slice(payload, 1000, 1000), false);  // failed: not fed
  CHECK(h.hashed() == 1000);
  h.EndWrite(h.Begin(), 1000, Slice(payload, 1000, 1000), true);
  CHECK(h.hashed() == 2000);
  h.EndWrite(h.Begin(), 500, Slice(payload, 500, 10), true);  // an overwrite: starts over
  CHECK(h.hashed() == 0);
  h.EndWrite(h.Begin(), 0, Slice(payload, 0, 3000), true);  // O_TRUNC's rewrite from 0 is fed
  CHECK(h.hashed() == 3000);
  h.EndResize(h.Begin(), 2999);  // a shrink below the prefix
  CHECK(h.hashed() == 0);
  h.EndWrite(h.Begin(), 0, Slice(payload, 0, 100), true);
  h.EndResize(h.Begin(), 100000);  // growing keeps it
  CHECK(h.hashed() == 100);

  // Two writes in flight at once: neither is fed, whatever order they end in.
  uint64_t a = h.Begin(), b = h.Begin();
  h.EndWrite(b, 200, Slice(payload, 200, 100), true);
  h.EndWrite(a, 100, Slice(payload, 100, 100), true);
  CHECK(h.hashed() == 100);
  // One that began alone but saw another begin before it ended is not fed either.
  uint64_t c = h.Begin();
  uint64_t d = h.Begin();
  h.EndWrite(c, 100, Slice(payload, 100, 100), true);
  h.EndWrite(d, 900, Slice(payload, 900, 100), true);
  CHECK(h.hashed() == 100);
  h.EndWrite(h.Begin(), 100, Slice(payload, 100, 100), true);  // alone again: fed
  CHECK(h.hashed() == 200);

  // A prefix of other chunks than the seal needs is not used.
  uint64_t hashed = 1;
  auto other = h.Take(kDefaultChunkSize * 2, &hashed);
  CHECK(hashed == 0);
}

TEST_CASE("FileStore: a payload written in order is committed without reading it back") {
  test::TempDir tmp;
  CountingEnv env;
  Opened o = Open(tmp.path(), &env);
  CacheIdentity id = Key(4);
  Bytes payload = Payload(1 << 20, 5);
  ReservationId r = Reserve(*o.store, id);
  for (size_t at = 0; at < payload.size(); at += 128 << 10) Write(*o.store, r, at, Slice(payload, at, 128 << 10));
  REQUIRE(o.store->Commit(r) == StatusCode::kOk);
  CHECK(env.read_bytes == 0);
  CHECK(o.medium->IoStats().read_back_bytes == 0);
  CheckDigest(*o.store, id, payload);
}

TEST_CASE("FileStore: out of order, overwritten or truncated payloads fall back to the read-back") {
  test::TempDir tmp;
  CountingEnv env;
  Opened o = Open(tmp.path(), &env);
  Bytes payload = Payload(600000, 6);
  const size_t half = 300000;

  SUBCASE("second half first") {
    CacheIdentity id = Key(4);
    ReservationId r = Reserve(*o.store, id);
    Write(*o.store, r, half, Slice(payload, half, half));
    Write(*o.store, r, 0, Slice(payload, 0, half));  // fed, and the rest read back
    REQUIRE(o.store->Commit(r) == StatusCode::kOk);
    CHECK(o.medium->IoStats().read_back_bytes == half);
    CheckDigest(*o.store, id, payload);
  }
  SUBCASE("an overwrite in the middle") {
    CacheIdentity id = Key(8);
    ReservationId r = Reserve(*o.store, id);
    Bytes garbage = Payload(1000, 9);
    Write(*o.store, r, 0, payload);
    Write(*o.store, r, 1000, garbage);
    Write(*o.store, r, 1000, Slice(payload, 1000, 1000));  // the payload's own bytes again
    REQUIRE(o.store->Commit(r) == StatusCode::kOk);
    CHECK(o.medium->IoStats().read_back_bytes == payload.size());
    CheckDigest(*o.store, id, payload);
  }
  SUBCASE("a truncate to zero and a rewrite (a reopen with O_TRUNC)") {
    CacheIdentity id = Key(16);
    ReservationId r = Reserve(*o.store, id);
    Write(*o.store, r, 0, Payload(700000, 1));
    REQUIRE(o.store->Truncate(r, 0) == StatusCode::kOk);
    Write(*o.store, r, 0, payload);
    REQUIRE(o.store->Commit(r) == StatusCode::kOk);
    CHECK(o.medium->IoStats().read_back_bytes == 0);
    CheckDigest(*o.store, id, payload);
  }
  SUBCASE("a truncate that cuts the written tail, then appends") {
    CacheIdentity id = Key(12);
    ReservationId r = Reserve(*o.store, id);
    Write(*o.store, r, 0, Payload(half + 5000, 6));  // the first `half` bytes are the payload's
    REQUIRE(o.store->Truncate(r, half) == StatusCode::kOk);
    auto n = o.store->Append(r, Slice(payload, half, half));
    REQUIRE(n.value() == half);
    REQUIRE(o.store->Commit(r) == StatusCode::kOk);
    CHECK(o.medium->IoStats().read_back_bytes == payload.size());
    CheckDigest(*o.store, id, payload);
  }
  SUBCASE("a size declared first (fallocate), then written in order") {
    CacheIdentity id = Key(20);
    ReservationId r = Reserve(*o.store, id);
    REQUIRE(o.store->Truncate(r, payload.size()) == StatusCode::kOk);
    Write(*o.store, r, 0, payload);
    REQUIRE(o.store->Commit(r) == StatusCode::kOk);
    CHECK(o.medium->IoStats().read_back_bytes == 0);
    CheckDigest(*o.store, id, payload);
  }
}

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

size_t FilesIn(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST_CASE("FileStore: reservations take spare files, refilled behind them and emptied at start") {
  test::TempDir tmp;
  const std::string dir = tmp.path();
  fs::create_directories(dir + "/spare");
  std::ofstream(dir + "/spare/987654") << "x";  // a spare left by a crash: spares are numbered
  Opened o = Open(dir, nullptr);  // the POSIX Env: the pool runs
  CHECK_FALSE(fs::exists(dir + "/spare/987654"));
  REQUIRE(WaitFor([&] { return o.medium->SparesReady(0) == FileMedium::kSpareDepth; }));
  CHECK(FilesIn(dir + "/spare") == FileMedium::kSpareDepth);

  CacheIdentity id = Key(4);
  ReservationId r = Reserve(*o.store, id);
  // The reservation writes into the spare it took (nothing created in tmp/); the pool is
  // topped up again behind it.
  CHECK(fs::is_empty(dir + "/tmp"));
  REQUIRE(WaitFor([&] { return o.medium->SparesReady(0) == FileMedium::kSpareDepth; }));
  CHECK(FilesIn(dir + "/spare") == FileMedium::kSpareDepth + 1);
  Bytes payload = Payload(100000, 2);
  Write(*o.store, r, 0, payload);
  REQUIRE(o.store->Commit(r) == StatusCode::kOk);
  CHECK(ReadBack(*o.store, id) == payload);
  CHECK(FilesIn(dir + "/spare") == FileMedium::kSpareDepth);  // the payload left as the block

  // A reservation in flight at a crash is dropped from spare/ at the next start.
  ReservationId in_flight = Reserve(*o.store, Key(100));
  Write(*o.store, in_flight, 0, payload);
  o.store.reset();  // no Abort: as far as the directory can tell, a crash
  FileStoreReport report;
  std::string error;
  auto again = OpenFileStore(dir, {}, &report, &error);
  REQUIRE_MESSAGE(again, error);
  CHECK(report.reservations_dropped == 1);
  CHECK(again->FindReservation(AddressOf(Key(100))) == std::nullopt);
  CHECK(again->Stat(AddressOf(Key(100))).status() == StatusCode::kNotFound);
  again.reset();  // a clean close unlinks the spares
  CHECK(fs::is_empty(dir + "/spare"));
}

}  // namespace
}  // namespace gpucache
