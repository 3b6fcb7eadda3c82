// Pins kept across restarts (data_dir/PINS): what a pin's answer promises after a restart.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <tuple>
#include <thread>

#include "store/file_store.h"
#include "tests/support/commit_block.h"
#include "tests/support/gate.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

using test::Payload;
using test::SampleIdentity;

bool IsPinsFile(const std::string& path) { return path.ends_with("/PINS"); }

// Fails the rename that publishes PINS while `failing` is set (in `only_under`, if not empty).
class FailingPinsEnv final : public EnvWrapper {
 public:
  StatusCode Rename(const std::string& from, const std::string& to) override {
    if (failing && IsPinsFile(to) && to.starts_with(only_under)) return StatusCode::kIoError;
    return EnvWrapper::Rename(from, to);
  }
  bool failing = false;
  std::string only_under;
};

// Holds the first write of PINS (its temporary file's open) until Release.
class HeldPinsEnv final : public EnvWrapper {
 public:
  int OpenAppend(const std::string& path, bool truncate) override {
    if (path.ends_with("/PINS.tmp")) gate.Hold(/*once=*/true);
    return EnvWrapper::OpenAppend(path, truncate);
  }
  test::Gate gate;
};

// `background`: the store verifies its blocks after it opens (verify_blocks = "background").
std::unique_ptr<IndexedStore> Open(const std::vector<std::string>& dirs, Env& env, bool background = false) {
  StoreOptions options;
  options.env = &env;
  options.verify_in_background = background;
  std::string error;
  auto s = OpenFileStore(dirs, options, nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}
std::unique_ptr<IndexedStore> Open(const std::string& dir, Env& env) {
  return Open(std::vector<std::string>{dir}, env);
}

// A store over `dir` holding two committed blocks, `a` and `b`.
std::unique_ptr<IndexedStore> OpenWith(const std::string& dir, Env& env, const CacheIdentity& a,
                                       const CacheIdentity& b) {
  auto s = Open(dir, env);
  test::CommitBlock(*s, a, Payload(4096, 1), {});
  test::CommitBlock(*s, b, Payload(4096, 2), {});
  return s;
}

// A store over `dir` with `id` committed and pinned.
std::unique_ptr<IndexedStore> OpenPinned(const std::string& dir, Env& env, const CacheIdentity& id) {
  auto s = Open(dir, env);
  test::CommitBlock(*s, id, Payload(4096, 1), {});
  REQUIRE(s->SetPinned(AddressOf(id), true) == StatusCode::kOk);
  return s;
}

// A pinned block refuses eviction (kBusy); an unpinned one goes (kOk).
bool Pinned(IndexedStore& s, const CacheIdentity& id) {
  return s.Evict(AddressOf(id)) == StatusCode::kBusy;
}

// Regression (observability review, 2026-12-06): a write of PINS that failed was not seen
// anywhere, so a pin answered OK could be gone after a restart with nothing to say why.
TEST_CASE("FileStore: a pin change that cannot be saved holds until a restart, and is counted") {
  test::TempDir dir;
  FailingPinsEnv env;
  CacheIdentity saved = SampleIdentity("acme", 1), unsaved = SampleIdentity("acme", 2);
  {
    auto s = OpenWith(dir.path(), env, saved, unsaved);
    REQUIRE(s->SetPinned(AddressOf(saved), true) == StatusCode::kOk);
    env.failing = true;
    // Not refused: on a full disk an unpin is how room is made (docs/operations.md, "Pins").
    CHECK(s->SetPinned(AddressOf(unsaved), true) == StatusCode::kOk);
    CHECK(s->Stats().metadata_errors == 1);
    CHECK(s->Stats().medium_errors == 0);  // no block file failed
    CHECK(Pinned(*s, unsaved));  // in memory
    env.failing = false;
  }
  // The restart applies the set saved last.
  auto s = Open(dir.path(), env);
  CHECK(Pinned(*s, saved));
  CHECK_FALSE(Pinned(*s, unsaved));
}

// Regression (2026-12-06): two pin changes wrote PINS at once, each with the set it saw, so the
// older set could land last (and both shared PINS.tmp): a pin answered OK was gone after a
// restart.
TEST_CASE("FileStore: concurrent pin changes leave the newest set saved") {
  test::TempDir dir;
  HeldPinsEnv env;
  CacheIdentity first = SampleIdentity("acme", 4), second = SampleIdentity("acme", 5);
  {
    auto s = OpenWith(dir.path(), env, first, second);
    std::thread t1([&] { CHECK(s->SetPinned(AddressOf(first), true) == StatusCode::kOk); });
    env.gate.WaitHeld();  // the first change has taken its set, {first}, and is about to write it
    std::thread t2([&] { CHECK(s->SetPinned(AddressOf(second), true) == StatusCode::kOk); });
    // Room for the second change to write {first, second} before the first lands, as it did.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    env.gate.Release();
    t1.join();
    t2.join();
  }
  auto s = Open(dir.path(), env);
  CHECK(Pinned(*s, first));
  CHECK(Pinned(*s, second));
}


// The data directory of `dirs` whose blocks/ holds the block of `id`.
std::string DirHolding(const std::vector<std::string>& dirs, const CacheIdentity& id) {
  for (const std::string& d : dirs) {
    if (std::filesystem::exists(d + "/blocks/" + AddressOf(id).RelativePath())) return d;
  }
  FAIL("no directory holds the block");
  return {};
}

// Blocks committed until one is in each of the two directories: {in dirs[0], in dirs[1]}.
std::pair<CacheIdentity, CacheIdentity> OnePerDir(IndexedStore& s, const std::vector<std::string>& dirs) {
  std::optional<CacheIdentity> first, second;
  for (int i = 10; i < 200 && !(first && second); ++i) {
    CacheIdentity id = SampleIdentity("acme", i);
    test::CommitBlock(s, id, Payload(4096, static_cast<uint8_t>(i)), {});
    (DirHolding(dirs, id) == dirs[0] ? first : second) = id;
  }
  REQUIRE((first && second));
  return {*first, *second};
}

// Regression (2026-12-07): PINS held every pin in every data directory and was read as the union
// of them, so an unpin whose write failed in a directory other than the block's came back after
// a restart.
TEST_CASE("FileStore: an unpin saved where its block is holds after a restart, whatever another directory missed") {
  test::TempDir a, b;
  FailingPinsEnv env;
  const std::vector<std::string> dirs{a.path(), b.path()};
  CacheIdentity id;
  {
    auto s = Open(dirs, env);
    id = OnePerDir(*s, dirs).first;  // in a
    REQUIRE(s->SetPinned(AddressOf(id), true) == StatusCode::kOk);
    env.failing = true;
    env.only_under = b.path() + "/";
    REQUIRE(s->SetPinned(AddressOf(id), false) == StatusCode::kOk);
    CHECK(s->Stats().metadata_errors == 1);  // saved in a, not in b
    env.failing = false;
  }
  auto s = Open(dirs, env);
  CHECK_FALSE(Pinned(*s, id));
}

// Regression (review of the above, 2026-12-07): with the newest copy of the whole set applied
// instead, a directory isolated (and its blocks forgotten) lost its pins when it came back.
TEST_CASE("FileStore: the pins of an isolated data directory come back with it") {
  test::TempDir a, b;
  FailingPinsEnv env;
  const std::vector<std::string> dirs{a.path(), b.path()};
  CacheIdentity in_a, in_b;
  {
    auto s = Open(dirs, env);
    std::tie(in_a, in_b) = OnePerDir(*s, dirs);
    REQUIRE(s->SetPinned(AddressOf(in_b), true) == StatusCode::kOk);
    REQUIRE(s->IsolateDomain(b.path()) == StatusCode::kOk);
    REQUIRE(s->SetPinned(AddressOf(in_a), true) == StatusCode::kOk);  // PINS written in a only
  }
  auto s = Open(dirs, env);
  CHECK(Pinned(*s, in_a));
  CHECK(Pinned(*s, in_b));
}

// Regression (2026-12-07): a pin left in PINS by an unpin whose write failed pinned whatever was
// committed at its path next, from the next restart on.
TEST_CASE("FileStore: a pin that could not be removed from PINS does not pin the next commit at its path") {
  test::TempDir dir;
  FailingPinsEnv env;
  CacheIdentity id = SampleIdentity("acme", 7);
  {
    auto s = OpenPinned(dir.path(), env, id);
    env.failing = true;
    REQUIRE(s->SetPinned(AddressOf(id), false) == StatusCode::kOk);  // PINS still names it
    env.failing = false;
    REQUIRE(s->Invalidate(AddressOf(id)) == StatusCode::kOk);
    test::CommitBlock(*s, id, Payload(4096, 2), {});  // another block at the same path
  }
  auto s = Open(dir.path(), env);
  CHECK_FALSE(Pinned(*s, id));
}

TEST_CASE("FileStore: a pin holds across a start that verifies in the background") {
  test::TempDir dir;
  FailingPinsEnv env;
  CacheIdentity id = SampleIdentity("acme", 8), other = SampleIdentity("acme", 9);
  {
    auto s = OpenWith(dir.path(), env, id, other);
    REQUIRE(s->SetPinned(AddressOf(id), true) == StatusCode::kOk);
  }
  auto s = Open({dir.path()}, env, /*background=*/true);
  s->WaitForVerification();
  CHECK(Pinned(*s, id));
  CHECK_FALSE(Pinned(*s, other));
}

// Regression (review, 2026-12-07): INDEX and PINS naming a block whose file was since replaced
// by another commit (their updates lost): an eager start read the file and left it unpinned, a
// start verifying in the background copied the old entry's pin onto it.
TEST_CASE("FileStore: a replaced file found at start is pinned by its own commit, verified before or after") {
  namespace fs = std::filesystem;
  test::TempDir dir;
  FailingPinsEnv env;
  CacheIdentity id = SampleIdentity("acme", 11);
  { OpenPinned(dir.path(), env, id); }
  fs::copy_file(dir.path() + "/INDEX", dir.path() + "/INDEX.saved");
  fs::copy_file(dir.path() + "/PINS", dir.path() + "/PINS.saved");
  {
    auto s = Open(dir.path(), env);
    REQUIRE(s->Invalidate(AddressOf(id)) == StatusCode::kOk);
    test::CommitBlock(*s, id, Payload(4096, 2), {});
  }
  for (bool background : {false, true}) {
    CAPTURE(background);
    test::TempDir copy;
    fs::copy(dir.path(), copy.path(), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    fs::rename(copy.path() + "/INDEX.saved", copy.path() + "/INDEX");
    fs::rename(copy.path() + "/PINS.saved", copy.path() + "/PINS");
    fs::remove(copy.path() + "/JOURNAL");
    auto s = Open({copy.path()}, env, background);
    s->WaitForVerification();
    CHECK_FALSE(Pinned(*s, id));
  }
}

// A pin still holds across restarts, and a PINS of the first format (paths alone) still reads.
TEST_CASE("FileStore: pins of the first PINS format still apply") {
  test::TempDir dir;
  FailingPinsEnv env;
  CacheIdentity pinned = SampleIdentity("acme", 8), other = SampleIdentity("acme", 9);
  { OpenWith(dir.path(), env, pinned, other); }
  REQUIRE(WriteFileAtomically(env, dir.path() + "/PINS", AddressOf(pinned).RelativePath() + "\n") ==
          StatusCode::kOk);
  auto s = Open(dir.path(), env);
  CHECK(Pinned(*s, pinned));
  CHECK_FALSE(Pinned(*s, other));
}

}  // namespace
}  // namespace gpucache
