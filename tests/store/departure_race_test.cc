// A block leaving the namespace (evicted, found corrupt, opened while it goes) has its file
// removed or moved after the store's lock is released. A new commit of the same address in that
// gap must not lose its file to the old block's departure: the departure works on the path, so
// the commit waits for it (store/indexed_store.h, `leaving_`).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "store/env.h"
#include "store/file_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
constexpr Owner kOwner{1000, 1000};

CacheIdentity Key() { return test::SampleIdentity("acme"); }

StatusCode CommitPayload(IndexedStore& s, const Bytes& payload) {
  BlockAddress a = AddressOf(Key());
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  if (!r.ok()) return r.status();
  if (StatusCode c = s.SetIdentity(r.value(), EncodePhysicalKey(Key())); c != StatusCode::kOk) return c;
  if (auto w = s.Write(r.value(), 0, payload); !w.ok()) return w.status();
  return s.Commit(r.value());
}

Bytes ReadAll(IndexedStore& s) {
  auto r = s.Open(AddressOf(Key()));
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

struct Store {
  explicit Store(const std::string& dir, Env* env) {
    for (const char* sub : {"/blocks", "/tmp", "/spare", "/quarantine"}) fs::create_directories(dir + sub);
    Fd lock(::open((dir + "/LOCK").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(::flock(lock.get(), LOCK_EX | LOCK_NB) == 0);
    std::vector<FileMedium::Device> devices;
    devices.push_back(FileMedium::Device{DataDir(dir), std::move(lock), false});
    StoreOptions options;
    options.env = env;
    store = std::make_unique<IndexedStore>(options, std::make_unique<FileMedium>(std::move(devices), options));
    FileStoreReport report;
    std::string error;
    REQUIRE_MESSAGE(store->Load(report, error), error);
  }
  std::unique_ptr<IndexedStore> store;
};

TEST_CASE("Departures: a commit of the address a block is leaving keeps its file") {
  for (bool reader_open : {false, true}) {
    CAPTURE(reader_open);  // true: the old block is quarantined (moved), not removed
    test::TempDir tmp;
    GapAtDeparture env;
    Store s(tmp.path(), &env);
    IndexedStore& store = *s.store;
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

}  // namespace
}  // namespace gpucache
