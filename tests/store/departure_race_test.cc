// A block leaving the namespace (evicted, found corrupt, opened while it goes) has its file
// removed or moved after the store's lock is released. A new commit of the same address in that
// gap must not lose its file to the old block's departure: the departure works on the path, so
// the commit waits for it (store/indexed_store.h, `leaving_`).
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

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

StatusCode CommitPayload(IndexedStore& s, const Bytes& payload, int k = 0) {
  BlockAddress a = AddressOf(Key(k));
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  if (!r.ok()) return r.status();
  if (StatusCode c = s.SetIdentity(r.value(), EncodePhysicalKey(Key(k))); c != StatusCode::kOk) return c;
  if (auto w = s.Write(r.value(), 0, payload); !w.ok()) return w.status();
  return s.Commit(r.value());
}

Bytes ReadAll(IndexedStore& s, int k = 0) {
  auto r = s.Open(AddressOf(Key(k)));
  if (!r.ok()) return {};
  Bytes out(r.value()->info().size);
  auto n = r.value()->Read(0, out);
  return n.ok() ? out : Bytes{};
}

// When the departing block's file is removed or renamed away (`Remove`, or `Rename` from its
// path), first lets `meanwhile` run on another thread, waiting up to a second for it: on the old
// code it ran to the end inside that gap.
class GapAtDeparture final : public EnvWrapper {
 public:
  StatusCode Remove(const std::string& path) override {
    AtGap(path);
    return EnvWrapper::Remove(path);
  }
  StatusCode Rename(const std::string& from, const std::string& to) override {
    AtGap(from);
    return EnvWrapper::Rename(from, to);
  }
  std::string block_path;
  std::function<void()> meanwhile;
  std::future<void> done;

 private:
  void AtGap(const std::string& path) {
    if (!meanwhile || path != block_path) return;
    done = std::async(std::launch::async, std::exchange(meanwhile, nullptr));
    done.wait_for(std::chrono::seconds(1));
  }
};

// A FileStore over `dir` (made if missing), through `o.env` if set.
std::unique_ptr<IndexedStore> OpenChecked(const std::string& dir, StoreOptions o) {
  std::string error;
  auto s = OpenFileStore(dir, std::move(o), nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

TEST_CASE("Departures: a commit of the address a block is leaving keeps its file") {
  for (bool reader_open : {false, true}) {
    CAPTURE(reader_open);  // true: the old block is quarantined (moved), not removed
    test::TempDir tmp;
    GapAtDeparture env;
    StoreOptions o;
    o.env = &env;
    std::unique_ptr<IndexedStore> opened = OpenChecked(tmp.path(), o);
    IndexedStore& store = *opened;
    const Bytes old_bytes = test::Payload(5000, 1), new_bytes = test::Payload(7000, 2);
    REQUIRE(CommitPayload(store, old_bytes) == StatusCode::kOk);
    std::shared_ptr<BlockReader> reader;
    if (reader_open) reader = store.Open(AddressOf(Key())).value();
    env.block_path = tmp.path() + "/blocks/" + AddressOf(Key()).RelativePath();
    REQUIRE(fs::exists(env.block_path));
    StatusCode recommitted = StatusCode::kIoError;
    env.meanwhile = [&] { recommitted = CommitPayload(store, new_bytes); };
    REQUIRE(store.Evict(AddressOf(Key())) == StatusCode::kOk);
    REQUIRE(env.done.valid());
    env.done.wait();
    CHECK(recommitted == StatusCode::kOk);
    CHECK(fs::exists(env.block_path));
    CHECK(ReadAll(store) == new_bytes);
  }
}

// The start that checks block files after the mount (adr/0016) walks every namespace and judges
// the files INDEX does not name: it deletes a damaged one and indexes a valid one. Both must
// leave alone an address that a commit or a departure is changing at the same time.
std::string PathOf(const std::string& dir, int k) { return dir + "/blocks/" + AddressOf(Key(k)).RelativePath(); }

// Holds the walk (StoreOptions::before_walk) until opened; opened at the latest when the case
// ends, before the store (declared after it) joins its walk.
struct WalkGate {
  void Wait() {
    std::unique_lock l(m);
    cv.wait(l, [this] { return open; });
  }
  void Open() {
    std::lock_guard l(m);
    open = true;
    cv.notify_all();
  }
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
};
struct OpenAtEnd {
  WalkGate& gate;
  ~OpenAtEnd() { gate.Open(); }
};

// A start that checks files after it opens, on `env`, its walk held by `gate`.
StoreOptions HeldWalk(Env& env, WalkGate& gate) {
  StoreOptions o;
  o.env = &env;
  o.verify_in_background = true;
  o.before_walk = [&gate] { gate.Wait(); };
  return o;
}

TEST_CASE("Departures: the walk deleting a stray damaged file never takes a commit's file") {
  test::TempDir tmp, other;
  // INDEX names block 1 (and so its namespace); block 0's file, from another store and with a
  // damaged header, lies where INDEX names nothing: the walk reads it and deletes it.
  REQUIRE(CommitPayload(*OpenChecked(tmp.path(), {}), test::Payload(3000, 1), 1) == StatusCode::kOk);
  REQUIRE(CommitPayload(*OpenChecked(other.path(), {}), test::Payload(4000, 3)) == StatusCode::kOk);
  fs::copy_file(PathOf(other.path(), 0), PathOf(tmp.path(), 0));
  {
    std::FILE* f = std::fopen(PathOf(tmp.path(), 0).c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, 40, SEEK_SET);
    std::fputc('X', f);
    std::fclose(f);
  }
  GapAtDeparture env;
  env.block_path = PathOf(tmp.path(), 0);
  WalkGate gate;
  auto store = OpenChecked(tmp.path(), HeldWalk(env, gate));
  OpenAtEnd open_at_end{gate};
  // Between the walk's verdict and its unlink, a commit of block 0 publishes its own file.
  const Bytes fresh = test::Payload(9000, 7);
  StatusCode committed = StatusCode::kIoError;
  env.meanwhile = [&] { committed = CommitPayload(*store, fresh); };
  gate.Open();
  store->WaitForVerification();
  REQUIRE(env.done.valid());
  env.done.wait();
  CHECK(committed == StatusCode::kOk);
  CHECK(fs::exists(env.block_path));
  CHECK(ReadAll(*store) == fresh);
}

TEST_CASE("Departures: the walk never brings back a block that left while it ran") {
  test::TempDir tmp;
  REQUIRE(CommitPayload(*OpenChecked(tmp.path(), {}), test::Payload(3000, 1), 1) == StatusCode::kOk);
  GapAtDeparture env;
  WalkGate gate;
  auto store = OpenChecked(tmp.path(), HeldWalk(env, gate));
  OpenAtEnd open_at_end{gate};
  // Block 0 is committed after the start (INDEX does not name it) and invalidated; while its
  // file is being removed, the walk runs to its end and finds that file.
  REQUIRE(CommitPayload(*store, test::Payload(5000, 2)) == StatusCode::kOk);
  env.block_path = PathOf(tmp.path(), 0);
  env.meanwhile = [&] {
    gate.Open();
    store->WaitForVerification();
  };
  REQUIRE(store->Invalidate(AddressOf(Key())) == StatusCode::kOk);
  REQUIRE(env.done.valid());
  env.done.wait();
  store->WaitForVerification();
  CHECK(store->Probe(AddressOf(Key())).status() == StatusCode::kNotFound);
  CHECK(store->Lookup(Key()).kind != LookupResult::Kind::kHit);
  CHECK_FALSE(fs::exists(env.block_path));
  CHECK(CommitPayload(*store, test::Payload(6000, 4)) == StatusCode::kOk);  // the address is free
  CHECK(ReadAll(*store) == test::Payload(6000, 4));
}

// An open finds the block in the index, then the medium opens its file without the store's
// lock. A block that leaves in that gap (unlinked, evicted) has its file moved into quarantine
// or removed, and the medium finds nothing at the path: the open must be a miss (ENOENT through
// the mount), not a corrupt block (EIO). Found by the load test under ASan (1 read in 4 runs).
class GapAtOpen final : public EnvWrapper {
 public:
  int OpenRead(const std::string& path) override {
    if (meanwhile && path == block_path) std::exchange(meanwhile, nullptr)();
    return EnvWrapper::OpenRead(path);
  }
  std::string block_path;
  std::function<void()> meanwhile;
};

TEST_CASE("Departures: a block that leaves while it is being opened is a miss, not a corrupt block") {
  for (bool quarantined : {false, true}) {
    CAPTURE(quarantined);  // true: another reader holds it, so its file is moved, not removed
    test::TempDir tmp;
    GapAtOpen env;
    StoreOptions o;
    o.env = &env;
    std::unique_ptr<IndexedStore> store = OpenChecked(tmp.path(), o);
    REQUIRE(CommitPayload(*store, test::Payload(5000, 1)) == StatusCode::kOk);
    std::shared_ptr<BlockReader> other;
    if (quarantined) other = store->Open(AddressOf(Key())).value();
    env.block_path = tmp.path() + "/blocks/" + AddressOf(Key()).RelativePath();
    env.meanwhile = [&] { REQUIRE(store->Invalidate(AddressOf(Key())) == StatusCode::kOk); };
    Result<std::shared_ptr<BlockReader>> opened = store->Open(AddressOf(Key()));
    CHECK(opened.status() == StatusCode::kNotFound);
    CHECK(store->Stats().tenants["acme"].checksum_failures == 0);  // not counted as damage
    if (quarantined) CHECK(other->info().size == 5000);
  }
}

}  // namespace
}  // namespace gpucache
