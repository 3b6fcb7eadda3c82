// StoreFills (store/store_fills.cc) in the gaps of its I/O: every fill call decides under the
// store's lock, calls the medium without it, and records the outcome under it again. What
// another thread does in that gap (a fence, a writer closing, another fill) must leave no fill
// behind and no limit passed.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <memory>
#include <string>

#include "store/env.h"
#include "store/file_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
constexpr Owner kOwner{1000, 1000};

// Block k of one namespace (k = 0 unless a case needs two).
CacheIdentity Key(int k = 0) { return test::SampleBlock(k); }

// Lets `meanwhile` run once, on another thread, inside the first call of the kind `at` (a
// medium call: no store lock held there), waiting up to a second for it: on the old code it ran
// to the end in that gap; where a fix makes it wait for the call, it finishes after it.
class GapInFill final : public EnvWrapper {
 public:
  enum class Call {
    kAllocate,    // after a payload's fallocate (a truncate that grows it)
    kWrite,       // before a write of `write_size` bytes (then failed if `fail_write`)
    kPartRename,  // before a rename out of tmp/: the seal's publication (then failed if
                  // `fail_part_rename`)
    kRemoveDir,   // before an rmdir (a namespace's removal)
    kCreate,      // before a fill's payload file is created (Reserve's Prepare)
  };

  int CreateExclusive(const std::string& path) override {
    AtGap(Call::kCreate);
    return EnvWrapper::CreateExclusive(path);
  }

  StatusCode Allocate(int fd, uint64_t offset, uint64_t length) override {
    StatusCode s = EnvWrapper::Allocate(fd, offset, length);
    AtGap(Call::kAllocate);
    return s;
  }
  StatusCode Write(int fd, std::span<const uint8_t> data, uint64_t offset) override {
    if (data.size() == write_size && AtGap(Call::kWrite) && fail_write) return StatusCode::kIoError;
    return EnvWrapper::Write(fd, data, offset);
  }
  StatusCode Rename(const std::string& from, const std::string& to) override {
    // Only the rename the gap is in fails: the fence's own (its EPOCH, through tmp/) must not.
    if (from.find("/tmp/") != std::string::npos && AtGap(Call::kPartRename) && fail_part_rename) {
      return StatusCode::kIoError;
    }
    return EnvWrapper::Rename(from, to);
  }
  StatusCode RemoveDir(const std::string& path) override {
    AtGap(Call::kRemoveDir);
    return EnvWrapper::RemoveDir(path);
  }
  // Waits for `meanwhile` to end, if it ran.
  void Join() {
    if (done.valid()) done.wait();
  }

  Call at = Call::kAllocate;
  std::function<void()> meanwhile;
  size_t write_size = SIZE_MAX;
  bool fail_write = false;
  bool fail_part_rename = false;

 private:
  // Whether the gap was here.
  bool AtGap(Call call) {
    if (call != at || !meanwhile) return false;
    done = std::async(std::launch::async, std::exchange(meanwhile, nullptr));
    done.wait_for(std::chrono::seconds(1));
    return true;
  }
  std::future<void> done;
};

std::unique_ptr<IndexedStore> Open(const std::string& dir, StoreOptions o) {
  std::string error;
  auto s = OpenFileStore(dir, std::move(o), nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

// Payload files of fills (tmp/, and spare/: a test Env makes no spares ahead, so any file there
// is a fill's too).
size_t FillFiles(const std::string& dir) {
  size_t n = 0;
  for (const char* sub : {"/tmp", "/spare"}) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir + sub, ec); !ec && it != fs::directory_iterator(); ++it) n++;
  }
  return n;
}

// A reservation of block k, its namespace made, its identity set.
ReservationId Reserve(IndexedStore& s, int k = 0) {
  BlockAddress a = AddressOf(Key(k));
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(Key(k))) == StatusCode::kOk);
  return r.value();
}

// Commits block k with `payload`, from the namespace to the rename.
StatusCode CommitPayload(IndexedStore& s, const Bytes& payload, int k) {
  BlockAddress a = AddressOf(Key(k));
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  if (!r.ok()) return r.status();
  if (StatusCode c = s.SetIdentity(r.value(), EncodePhysicalKey(Key(k))); c != StatusCode::kOk) return c;
  if (auto w = s.Write(r.value(), 0, payload); !w.ok()) return w.status();
  return s.Commit(r.value());
}

// Regression (review, 2026-12-06): a truncate by path (no writer open) fenced during its
// allocate answered OK, and its fill stayed: fenced, unreachable, its file and descriptor held
// outside every limit until the daemon stopped.
TEST_CASE("Fills: a fence during a truncate by path ends the fill, its file with it") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  auto store = Open(tmp.path(), o);
  ReservationId r = Reserve(*store);  // as a create, then `truncate -s` by path: no writer
  env.at = GapInFill::Call::kAllocate;
  env.meanwhile = [&] { REQUIRE(store->Fence().ok()); };
  CHECK(store->Truncate(r, 1 << 20) == StatusCode::kFenced);  // ESTALE, as for a write
  env.Join();
  CHECK(FillFiles(tmp.path()) == 0);
}

// Regression (review, 2026-12-06): a commit fenced while it sealed, whose seal then failed,
// returned the seal's error before looking at the fence, and its fill stayed as above.
TEST_CASE("Fills: a fence while a commit seals ends the fill even when the seal fails") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  auto store = Open(tmp.path(), o);
  ReservationId r = Reserve(*store);
  REQUIRE(store->Write(r, 0, test::Payload(5000)).ok());
  env.at = GapInFill::Call::kPartRename;
  env.fail_part_rename = true;
  env.meanwhile = [&] { REQUIRE(store->Fence().ok()); };
  CHECK(store->Commit(r) == StatusCode::kFenced);
  env.Join();
  CHECK(FillFiles(tmp.path()) == 0);
  CHECK_FALSE(store->Stat(AddressOf(Key())).ok());
}

// Regression (review of stop 44): a fence released the address of a commit that was sealing;
// a new fill of the same block then reserved, wrote and committed (acknowledged) in that gap,
// and the fenced seal, told of its fence, removed the file under the block's name: the new
// block's. Its writer was told kOk and the block was gone, after a restart too. The lease
// check (adr/0006) is off here (a lease of 0), so that only the claim is tested.
TEST_CASE("Fills: a fence while a commit seals never costs a later commit of the same block its file") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  o.reservation_lease_ns = 0;
  auto store = Open(tmp.path(), o);
  ReservationId r = Reserve(*store);
  REQUIRE(store->Write(r, 0, test::Payload(5000)).ok());
  env.at = GapInFill::Call::kPartRename;
  StatusCode meanwhile = StatusCode::kOk;
  env.meanwhile = [&] {
    REQUIRE(store->Fence().ok());
    meanwhile = CommitPayload(*store, test::Payload(7000), 0);
  };
  CHECK(store->Commit(r) == StatusCode::kFenced);
  env.Join();
  CHECK(meanwhile != StatusCode::kOk);  // the address was still the fenced seal's
  // Once the fenced commit has ended, the block can be committed again, and it stays.
  REQUIRE(CommitPayload(*store, test::Payload(7000), 0) == StatusCode::kOk);
  Result<BlockInfo> b = store->Stat(AddressOf(Key()));
  REQUIRE(b.ok());
  CHECK(b->size == 7000);
}

// adr/0006: for one lease after a fence, a new fill of a fenced block is ESTALE whatever the
// entry point (here the store's Reserve, which CREATE, the commit channel and a cold refill
// share), so that the fenced writer's late commit hears ESTALE and not another fill's EBUSY or
// its bytes. Other blocks fill as usual.
TEST_CASE("Fills: for one lease after a fence a fenced block cannot be filled again") {
  test::TempDir tmp;
  StoreOptions o;
  auto store = Open(tmp.path(), o);
  ReservationId r = Reserve(*store);
  REQUIRE(store->OpenWriter(r) == StatusCode::kOk);  // held: fenced, not forgotten
  REQUIRE(store->Fence().ok());
  CHECK(store->Reserve(AddressOf(Key()), kOwner).status() == StatusCode::kFenced);
  CHECK(store->FillOutcome(AddressOf(Key())) == FillState::kFenced);
  CHECK(CommitPayload(*store, test::Payload(3000), 1) == StatusCode::kOk);
  store->CloseWriter(r);
  CHECK(store->Reserve(AddressOf(Key()), kOwner).status() == StatusCode::kFenced);
}

// Regression (review, 2026-12-06): a write in flight when a fence came and its handle's writer
// role ended (another thread's close) kept the fill: the close left it to the write, and the
// write only answered kFenced.
TEST_CASE("Fills: a write in flight through a fence and its writer's close ends the fill") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  auto store = Open(tmp.path(), o);
  ReservationId r = Reserve(*store);
  REQUIRE(store->OpenWriter(r) == StatusCode::kOk);
  env.at = GapInFill::Call::kWrite;
  env.write_size = 5000;
  env.meanwhile = [&] {
    REQUIRE(store->Fence().ok());
    store->CloseWriter(r);
  };
  CHECK(store->Write(r, 0, test::Payload(5000)).status() == StatusCode::kFenced);
  env.Join();
  CHECK(FillFiles(tmp.path()) == 0);
}

// Regression (review, 2026-12-06): a commit was given room under max_retained_bytes, then
// sealed without the lock, its bytes counted nowhere until indexed; a second commit in that gap
// saw the same usage, and both were kept: 12,000 bytes under a limit of 10,000.
// Regression (review, 2026-12-06): Reserve claims the address, then leaves the lock while the
// medium makes the payload file; a caller who found the fill by its name meanwhile (a truncate,
// a write through a reopen or a rename of the .part by the same uid) reached the medium with
// no payload: a null dereference, the daemon down for every tenant.
TEST_CASE("Fills: a fill found by its name while its file is being made is busy, not a crash") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  auto store = Open(tmp.path(), o);
  BlockAddress a = AddressOf(Key());
  REQUIRE(store->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kOk);
  StatusCode truncated = StatusCode::kOk, written = StatusCode::kOk, committed = StatusCode::kOk;
  env.at = GapInFill::Call::kCreate;
  env.meanwhile = [&] {
    std::optional<ReservationId> found = store->FindReservation(a);
    REQUIRE(found);
    truncated = store->Truncate(*found, 4096);
    REQUIRE(store->OpenWriter(*found) == StatusCode::kOk);
    written = store->Write(*found, 0, test::Payload(100)).status();
    store->CloseWriter(*found);
    committed = store->Commit(*found);
  };
  auto r = store->Reserve(a, kOwner);
  env.Join();
  REQUIRE(r.ok());
  CHECK(truncated == StatusCode::kBusy);
  CHECK(written == StatusCode::kBusy);
  CHECK(committed == StatusCode::kBusy);
  // The fill itself goes on as if nothing had happened.
  REQUIRE(store->SetIdentity(r.value(), EncodePhysicalKey(Key())) == StatusCode::kOk);
  REQUIRE(store->Write(r.value(), 0, test::Payload(5000)).ok());
  CHECK(store->Commit(r.value()) == StatusCode::kOk);
  CHECK(store->Stat(a).ok());
}

TEST_CASE("Fills: two commits sealing at once stay within max_retained_bytes, tenant or global") {
  struct Case {
    std::string limit;
  };
  for (const Case& c : {Case{"tenant"}, Case{"global"}}) {
    CAPTURE(c.limit);
    test::TempDir tmp;
    GapInFill env;
    StoreOptions o;
    o.env = &env;
    if (c.limit == "tenant") {
      o.limits.tenants["acme"].max_retained_bytes = 10000;
    } else {
      o.limits.global.max_retained_bytes = 10000;
    }
    auto store = Open(tmp.path(), o);
    StatusCode second = StatusCode::kIoError;
    env.at = GapInFill::Call::kPartRename;
    env.meanwhile = [&] { second = CommitPayload(*store, test::Payload(6000, 2), 2); };
    CHECK(CommitPayload(*store, test::Payload(6000, 1), 1) == StatusCode::kOk);
    env.Join();
    // The first's bytes are not evictable while it seals: the second is refused. Since
    // 2026-12-07 at its write, as bytes in flight together past the limit (EAGAIN: the first's
    // commit is what it waits for); before, at its commit, as it is once the first is pinned.
    CHECK(second == StatusCode::kExhausted);
    Usage usage = store->Stats().tenants["acme"].usage;
    CHECK(usage.retained_bytes() == 6000);
    CHECK(usage.committing_bytes == 0);
    // Sealed, the first is a block like any other: a commit after it evicts it.
    CHECK(CommitPayload(*store, test::Payload(6000, 3), 3) == StatusCode::kOk);
    CHECK(store->Stats().tenants["acme"].usage.retained_bytes() == 6000);
  }
}

// Regression (review, 2026-12-06): a write's growth was admitted against max_inflight_bytes
// under the lock but counted only once its I/O was done; a second write in that gap passed
// against the same count, and both were kept: 12,000 bytes in flight under a limit of 10,000.
TEST_CASE("Fills: two writes at once stay within max_inflight_bytes, and a failed one gives its credit back") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  o.limits.tenants["acme"].max_inflight_bytes = 10000;
  auto store = Open(tmp.path(), o);
  ReservationId r1 = Reserve(*store, 1), r2 = Reserve(*store, 2);
  Result<size_t> second = StatusCode::kIoError;
  env.at = GapInFill::Call::kWrite;
  env.write_size = 6000;
  env.meanwhile = [&] { second = store->Write(r2, 0, test::Payload(6000, 2)); };
  CHECK(store->Write(r1, 0, test::Payload(6000, 1)).ok());
  env.Join();
  CHECK(second.status() == StatusCode::kExhausted);
  CHECK(store->Stats().tenants["acme"].usage.inflight_bytes == 6000);

  // A write the medium fails was counted while it ran, and is not once it failed.
  env.write_size = 3000;
  env.fail_write = true;
  Usage during;
  env.meanwhile = [&] { during = store->Stats().tenants["acme"].usage; };
  CHECK(store->Write(r1, 6000, test::Payload(3000, 1)).status() == StatusCode::kIoError);
  env.Join();
  CHECK(during.inflight_bytes == 9000);
  CHECK(store->Stats().tenants["acme"].usage.inflight_bytes == 6000);
  CHECK(store->Write(r2, 0, test::Payload(4000, 2)).ok());
  CHECK(store->Stats().tenants["acme"].usage.inflight_bytes == 10000);
}

// Regression (review, 2026-12-06): a removal took the namespace out of the index, then removed
// its directory without the lock; a mkdir of it in that gap indexed it again, and the rmdir then
// took the directory: the namespace listed, every commit into it failing (ENOENT).
TEST_CASE("Fills: a mkdir of a namespace racing its rmdir leaves it whole") {
  test::TempDir tmp;
  GapInFill env;
  StoreOptions o;
  o.env = &env;
  auto store = Open(tmp.path(), o);
  BlockAddress a = AddressOf(Key());
  REQUIRE(store->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kOk);
  StatusCode created = StatusCode::kIoError;
  env.at = GapInFill::Call::kRemoveDir;
  env.meanwhile = [&] { created = store->CreateNamespace(a.tenant, a.ns, kOwner); };
  CHECK(store->RemoveNamespace(a.tenant, a.ns) == StatusCode::kOk);
  env.Join();  // the create waited for the removal, then made the namespace again
  CHECK(created == StatusCode::kOk);
  CHECK(store->CreateNamespace(a.tenant, a.ns, kOwner) == StatusCode::kExists);
  CHECK(CommitPayload(*store, test::Payload(100), 0) == StatusCode::kOk);
}

}  // namespace
}  // namespace gpucache
