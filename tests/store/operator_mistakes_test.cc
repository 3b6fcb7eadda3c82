// An operator's mistake never costs data (adr/0017): a data directory that is not gpucache's is
// refused before anything in it is touched, and a start follows no symbolic link inside one.
// Each case here deleted or wrote files before: `data_dir` naming a directory of the host's,
// and a namespace directory replaced by a link to another tenant's.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "store/file_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
constexpr Owner kOwner{1000, 1000};

CacheIdentity Key(const char* tenant, int k) {
  CacheIdentity id = test::SampleIdentity(tenant);
  id.chain[1] = test::Hash(static_cast<uint8_t>(k + 40));
  return id;
}
Bytes PayloadOf(const char* tenant, int k) {
  return test::Payload(4000 + k, static_cast<uint8_t>(k + (tenant[0] == 'b' ? 50 : 0)));
}

void Commit(IndexedStore& s, const char* tenant, int k) {
  BlockAddress a = AddressOf(Key(tenant, k));
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  REQUIRE(r.ok());
  REQUIRE(s.SetIdentity(r.value(), EncodePhysicalKey(Key(tenant, k))) == StatusCode::kOk);
  REQUIRE(s.Write(r.value(), 0, PayloadOf(tenant, k)).ok());
  REQUIRE(s.Commit(r.value()) == StatusCode::kOk);
}

Bytes ReadAll(IndexedStore& s, const char* tenant, int k) {
  auto r = s.Open(AddressOf(Key(tenant, k)));
  if (!r.ok()) return {};
  Bytes out(r.value()->info().size);
  return r.value()->Read(0, out).ok() ? out : Bytes{};
}

std::set<std::string> NamesIn(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::unique_ptr<IndexedStore> TryOpen(const std::string& dir, std::string* error, bool background = true) {
  StoreOptions o;
  o.verify_in_background = background;
  FileStoreReport report;
  auto s = OpenFileStore(dir, o, &report, error);
  if (s) s->WaitForVerification();
  return s;
}

}  // namespace

TEST_CASE("Operator mistakes: a data directory holding files gpucache did not make is refused and left as it was") {
  // The shape of `data_dir = "/"` or "/var": a tmp/ of the host's with files in it.
  test::TempDir host;
  const std::string dir = host.path();
  fs::create_directories(dir + "/tmp");
  std::ofstream(dir + "/tmp/someone-elses-socket-file") << "keep me";
  std::ofstream(dir + "/tmp/12.part") << "not ours either: the directory is not gpucache's";
  std::ofstream(dir + "/notes.txt") << "keep me too";
  const std::set<std::string> before = NamesIn(dir), tmp_before = NamesIn(dir + "/tmp");

  std::string error;
  CHECK(TryOpen(dir, &error) == nullptr);
  CHECK(error.find("did not make") != std::string::npos);
  CHECK(error.find("notes.txt") != std::string::npos);
  CHECK(NamesIn(dir) == before);  // no LOCK, EPOCH, INDEX or blocks/ written
  CHECK(NamesIn(dir + "/tmp") == tmp_before);
}

TEST_CASE("Operator mistakes: a new or empty directory becomes a data directory, and only its own leftovers are deleted") {
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/new/data";
  std::string error;
  {
    auto s = TryOpen(dir, &error);
    REQUIRE_MESSAGE(s, error);
    Commit(*s, "acme", 1);
  }
  CHECK(fs::is_regular_file(dir + "/GPUCACHE-DATA"));
  CHECK((fs::status(dir).permissions() & fs::perms::others_all) == fs::perms::none);
  // In a directory that is gpucache's, its numbered leftovers go and anything else stays.
  std::ofstream(dir + "/tmp/77.part") << "a reservation a crash left";
  std::ofstream(dir + "/tmp/77.dropped") << "a parked file";
  std::ofstream(dir + "/tmp/README") << "put here by hand";
  std::ofstream(dir + "/spare/hand-made") << "put here by hand";
  // quarantine/ too (review of stop 44: every file there that was not a block was deleted).
  std::ofstream(dir + "/quarantine/notes.txt") << "put here by hand";
  std::ofstream(dir + "/quarantine/12345") << "a quarantined block's file, damaged";
  FileStoreReport report;
  auto s = OpenFileStore(dir, {}, &report, &error);
  REQUIRE_MESSAGE(s, error);
  CHECK(NamesIn(dir + "/tmp") == std::set<std::string>{"README"});
  CHECK(fs::exists(dir + "/spare/hand-made"));
  CHECK(NamesIn(dir + "/quarantine") == std::set<std::string>{"notes.txt"});
  CHECK(report.reservations_dropped == 2);
  CHECK(ReadAll(*s, "acme", 1) == PayloadOf("acme", 1));
}

TEST_CASE("Operator mistakes: a data directory made before the marker is taken as it is") {
  test::TempDir tmp;
  const std::string dir = tmp.path();
  std::string error;
  {
    auto s = TryOpen(dir, &error);
    REQUIRE_MESSAGE(s, error);
    Commit(*s, "acme", 2);
  }
  fs::remove(dir + "/GPUCACHE-DATA");  // as an older gpucache left it
  auto s = TryOpen(dir, &error);
  REQUIRE_MESSAGE(s, error);
  CHECK(ReadAll(*s, "acme", 2) == PayloadOf("acme", 2));
  CHECK(fs::is_regular_file(dir + "/GPUCACHE-DATA"));
}

TEST_CASE("Operator mistakes: a symlinked namespace directory never leads a start to another tenant's files") {
  for (bool background : {true, false}) {
    CAPTURE(background);
    test::TempDir tmp;
    const std::string dir = tmp.path();
    std::string error;
    {
      auto s = TryOpen(dir, &error, background);
      REQUIRE_MESSAGE(s, error);
      for (int k = 0; k < 4; k++) {
        Commit(*s, "acme", k);
        Commit(*s, "beta", k);
      }
    }
    const BlockAddress acme = AddressOf(Key("acme", 0)), beta = AddressOf(Key("beta", 0));
    const std::string acme_ns = dir + "/blocks/acme/" + acme.ns;
    const std::string beta_ns = dir + "/blocks/beta/" + beta.ns;
    const std::set<std::string> beta_files = NamesIn(beta_ns);
    REQUIRE(beta_files.size() == 4);
    // While the daemon is down, acme's namespace becomes a link to beta's.
    fs::remove_all(acme_ns);
    fs::create_directory_symlink(beta_ns, acme_ns);

    auto s = TryOpen(dir, &error, background);
    REQUIRE_MESSAGE(s, error);
    CHECK(NamesIn(beta_ns) == beta_files);
    for (int k = 0; k < 4; k++) {
      CHECK(ReadAll(*s, "beta", k) == PayloadOf("beta", k));
      CHECK(ReadAll(*s, "acme", k).empty());  // never beta's bytes under acme's name
    }
    s.reset();
    CHECK(NamesIn(beta_ns) == beta_files);
    CHECK(fs::is_symlink(acme_ns));  // left for the operator to look at
  }
}

TEST_CASE("Operator mistakes: a link at the top of a data directory is refused before anything is deleted") {
  for (const char* sub : {"tmp", "spare"}) {
    CAPTURE(sub);
    test::TempDir tmp, elsewhere;
    const std::string dir = tmp.path();
    std::string error;
    REQUIRE_MESSAGE(TryOpen(dir, &error), error);
    std::ofstream(elsewhere.path() + "/5.part") << "the host's";
    std::ofstream(elsewhere.path() + "/6") << "the host's";
    fs::remove_all(dir + "/" + sub);
    fs::create_directory_symlink(elsewhere.path(), dir + "/" + sub);
    CHECK(TryOpen(dir, &error) == nullptr);
    CHECK(error.find("symbolic link") != std::string::npos);
    CHECK(NamesIn(elsewhere.path()) == std::set<std::string>{"5.part", "6"});
  }
}

TEST_CASE("Operator mistakes: two names of one data directory are refused") {
  test::TempDir tmp;
  const std::string dir = tmp.path() + "/d1";
  fs::create_directories(dir);
  fs::create_directory_symlink(dir, tmp.path() + "/alias");
  std::string error;
  for (const std::vector<std::string>& dirs :
       {std::vector<std::string>{dir, dir + "/"}, std::vector<std::string>{dir, tmp.path() + "/alias"},
        std::vector<std::string>{dir, dir + "/blocks/x"}}) {
    CHECK(OpenFileStore(dirs, {}, nullptr, &error) == nullptr);
    CHECK(error.find("another data directory") != std::string::npos);
  }
}

TEST_CASE("Operator mistakes: a second daemon on one data directory is refused, naming the holder's pid") {
  test::TempDir tmp;
  std::string error;
  auto first = TryOpen(tmp.path(), &error);
  REQUIRE_MESSAGE(first, error);
  CHECK(TryOpen(tmp.path(), &error) == nullptr);
  CHECK(error.find("in use by another gpucachefs, pid " + std::to_string(::getpid())) != std::string::npos);
}

TEST_CASE("FileStore: an unreadable epoch file stops start-up instead of guessing") {
  test::TempDir tmp;
  {
    std::string first;
    REQUIRE_MESSAGE(TryOpen(tmp.path(), &first), first);
  }
  std::ofstream(tmp.path() + "/EPOCH") << "garbage";
  std::string error;
  CHECK(OpenFileStore(tmp.path(), {}, nullptr, &error) == nullptr);
  CHECK(error.find("EPOCH") != std::string::npos);
}

// Regression (observability review, 2026-12-06): a start that could not write EPOCH said "in
// every data directory", not which one, nor why.
TEST_CASE("FileStore: an EPOCH that cannot be written stops start-up naming its file") {
  test::TempDir tmp;
  {
    std::string first;
    REQUIRE_MESSAGE(TryOpen(tmp.path(), &first), first);
  }
  std::filesystem::create_directory(tmp.path() + "/EPOCH.tmp");  // EISDIR for the write
  std::string error;
  CHECK(OpenFileStore(tmp.path(), {}, nullptr, &error) == nullptr);
  CHECK_MESSAGE(error.find("cannot write the epoch to " + tmp.path() + "/EPOCH (I/O error") != std::string::npos, error);
}

// Review of stop 44: an EPOCH of 2^64 - 1 wrapped to epoch 0 at the start's + 1, and any of
// 2^32 or more made region ids (epoch << 32 | sequence) repeat an earlier epoch's, so a
// quarantine rename could replace another quarantined block's file.
TEST_CASE("FileStore: an EPOCH past the last epoch stops start-up, the last one still starts") {
  for (uint64_t planted : {UINT64_MAX, uint64_t{1} << 32, kLastEpoch}) {
    CAPTURE(planted);
    test::TempDir tmp;
    {
    std::string first;
    REQUIRE_MESSAGE(TryOpen(tmp.path(), &first), first);
  }
    std::ofstream(tmp.path() + "/EPOCH") << planted << "\n";
    std::string error;
    CHECK(OpenFileStore(tmp.path(), {}, nullptr, &error) == nullptr);
    CHECK(error.find("region ids would repeat") != std::string::npos);
  }
  test::TempDir tmp;
  {
    std::string first;
    REQUIRE_MESSAGE(TryOpen(tmp.path(), &first), first);
  }
  std::ofstream(tmp.path() + "/EPOCH") << kLastEpoch - 1 << "\n";
  std::string opened;
  auto s = TryOpen(tmp.path(), &opened);  // in the last epoch
  REQUIRE_MESSAGE(s, opened);
  CHECK(s->Stats().epoch == kLastEpoch);
  CHECK(s->Fence().status() == StatusCode::kTooLarge);  // no epoch after it
  CHECK(s->Stats().epoch == kLastEpoch);
}

// Regression (review, 2026-12-07): every entry of a namespace directory whose name no block can
// have (an operator's notes, a copy, a link) was moved to damaged/, which keeps 32 files and
// deletes the rest: 12 of 44 planted files gone after one start. adr/0017: only gpucache's own
// files are removed. They stay where they are now, start after start, in both kinds of start;
// and what an operator keeps in damaged/ is never pruned.
TEST_CASE("Operator mistakes: files that are not gpucache's in a namespace or in damaged/ stay, start after start") {
  for (bool background : {true, false}) {
    CAPTURE(background);
    test::TempDir tmp;
    std::string error;
    {
      auto s = TryOpen(tmp.path(), &error, background);
      REQUIRE(s);
      Commit(*s, "acme", 1);
    }
    BlockAddress a = AddressOf(Key("acme", 1));
    const std::string ns = tmp.path() + "/blocks/" + a.tenant + "/" + a.ns;
    std::set<std::string> planted;
    for (int i = 0; i < 40; ++i) {
      std::string name = "note" + std::to_string(i) + ".txt";
      std::ofstream(ns + "/" + name) << "mine " << i;
      planted.insert(name);
    }
    fs::create_directories(tmp.path() + "/damaged");
    std::ofstream(tmp.path() + "/damaged/0-operator-notes") << "an operator's";
    for (int start = 0; start < 2; ++start) {
      auto s = TryOpen(tmp.path(), &error, background);
      REQUIRE(s);
      CHECK(ReadAll(*s, "acme", 1) == PayloadOf("acme", 1));
      s.reset();
      // Damaged block files for the next start: set aside in damaged/, which is then pruned.
      for (int k = 10; k < 50; ++k) std::ofstream(ns + "/" + AddressOf(Key("acme", k)).block) << "not a block file";
    }
    std::set<std::string> left = NamesIn(ns);
    for (const std::string& name : planted) CHECK(left.count(name) == 1);
    CHECK(fs::exists(tmp.path() + "/damaged/0-operator-notes"));  // sorts before every stamp
  }
}

// Regression (review, 2026-12-07): a deleted EPOCH made the next start begin again at epoch 1,
// whose region ids the directory's blocks already held. A garbled EPOCH was refused; a missing
// one beside an index now is too, with what to do, and nothing in the directory changes.
TEST_CASE("Operator mistakes: a data directory that lost its EPOCH is refused, not restarted at epoch 1") {
  test::TempDir tmp;
  std::string error;
  {
    auto s = TryOpen(tmp.path(), &error);
    REQUIRE(s);
    Commit(*s, "acme", 1);
  }
  REQUIRE(fs::remove(tmp.path() + "/EPOCH"));
  const std::set<std::string> before = NamesIn(tmp.path());
  CHECK_FALSE(TryOpen(tmp.path(), &error));
  CHECK(error.find(tmp.path() + "/EPOCH is missing beside " + tmp.path() + "/") != std::string::npos);
  CHECK(error.find("refusing to guess the epoch") != std::string::npos);
  CHECK(NamesIn(tmp.path()) == before);  // no EPOCH written
  std::ofstream(tmp.path() + "/EPOCH") << "7\n";
  auto s = TryOpen(tmp.path(), &error);
  REQUIRE(s);
  CHECK(s->Stats().epoch == 8);
  CHECK(ReadAll(*s, "acme", 1) == PayloadOf("acme", 1));
}

}  // namespace gpucache
