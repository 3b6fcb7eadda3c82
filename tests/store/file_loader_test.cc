// FileLoader (store/file_loader.h) alone, over real data directories a FileStore wrote: what a
// start hands over part by part, what it sets aside, and what the walk of a start that verifies
// later gives back for FileMedium's journal. The loader never sees the store.
#include "store/file_loader.h"

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "store/file_store.h"
#include "store/located_file.h"
#include "store/index_entry.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
using test::Payload;
using test::SampleIdentity;

const Owner kOwner{1000, 1000};

CacheIdentity Block(uint8_t n) {
  CacheIdentity id = SampleIdentity("acme", 16);
  id.chain[0] = test::Hash(n);
  return id;
}

// A data directory holding blocks 1..count, closed cleanly (INDEX written, the journal empty).
void Populate(const std::string& dir, uint8_t count) {
  std::string error;
  auto s = OpenFileStore(dir, {}, nullptr, &error);
  REQUIRE_MESSAGE(s, error);
  for (uint8_t n = 1; n <= count; ++n) {
    BlockAddress a = AddressOf(Block(n));
    s->CreateNamespace(a.tenant, a.ns, kOwner);
    auto r = s->Reserve(a, kOwner);
    REQUIRE(r.ok());
    s->SetIdentity(r.value(), EncodePhysicalKey(Block(n)));
    REQUIRE(s->Write(r.value(), 0, Payload(1000 + n)).ok());
    REQUIRE(s->Commit(r.value()) == StatusCode::kOk);
  }
}

std::string PathOf(const std::string& dir, uint8_t n) { return DataDir(dir).Block(AddressOf(Block(n))); }

// One data directory's parts, as FileMedium holds them.
struct OneDevice {
  explicit OneDevice(const std::string& dir)
      : devices(Env::Posix(), [&] {
          std::vector<DeviceSet::Device> d;
          d.push_back({DataDir(dir), Fd(), false});
          return d;
        }()) {
    located.push_back(std::make_shared<Located>(0));
    logs.push_back(std::make_unique<IndexLog>(Env::Posix(), devices.dir(0)));
  }
  FileLoader Loader() { return FileLoader(Env::Posix(), devices, located, logs, /*stat_ahead=*/false); }
  DeviceSet devices;
  std::vector<std::shared_ptr<StoredPayload>> located;
  std::vector<std::unique_ptr<IndexLog>> logs;
};

struct Handed {
  size_t blocks = 0, unverified = 0, namespaces = 0;
  uint64_t expected = 0;
};

Handed Drain(FileLoader& loader) {
  Handed h;
  Found part;
  while (loader.NextFound(part)) {
    h.expected += part.expected_blocks;
    h.namespaces += part.namespaces.size();
    (part.unverified ? h.unverified : h.blocks) += part.count;
  }
  return h;
}

TEST_CASE("FileLoader: an eager start hands over every block INDEX names, checked by its file's stat") {
  test::TempDir tmp;
  Populate(tmp.path(), 3);
  OneDevice one(tmp.path());
  FileLoader loader = one.Loader();
  MediumReport report;
  CHECK_FALSE(loader.Load(report, /*verify_later=*/false, 64u << 20).has_value());
  Handed h = Drain(loader);
  CHECK(h.blocks == 3);
  CHECK(h.unverified == 0);
  CHECK(h.expected == 3);
  CHECK(h.namespaces == 1);
  CHECK(report.blocks_loaded == 3);
  CHECK(report.from_snapshot == 3);  // no file read in full
  CHECK(report.blocks_skipped == 0);
  CHECK(loader.HeldBytes() == 0);  // handed over: the start's lists are freed, not just emptied
}

TEST_CASE("FileLoader: a damaged block file is set aside and reported, the others are handed over") {
  test::TempDir tmp;
  Populate(tmp.path(), 3);
  { std::ofstream(PathOf(tmp.path(), 2), std::ios::trunc) << "not a block"; }
  OneDevice one(tmp.path());
  FileLoader loader = one.Loader();
  MediumReport report;
  loader.Load(report, /*verify_later=*/false, 64u << 20);
  Handed h = Drain(loader);
  CHECK(h.blocks == 2);
  CHECK(report.blocks_skipped == 1);
  CHECK_FALSE(fs::exists(PathOf(tmp.path(), 2)));
  CHECK(fs::exists(DataDir(tmp.path()).Damaged()));
  REQUIRE(report.problems.size() == 1);
  CHECK(report.problems[0].find("corrupt or truncated header") != std::string::npos);
}

TEST_CASE("FileLoader: a start that verifies later hands the entries over unchecked, and its walk returns "
          "what FileMedium must journal") {
  test::TempDir tmp;
  Populate(tmp.path(), 3);
  // Block 3's file replaced by a copy of itself: the same bytes, another inode.
  const std::string three = PathOf(tmp.path(), 3);
  fs::copy_file(three, three + ".copy");
  fs::rename(three + ".copy", three);
  OneDevice one(tmp.path());
  FileLoader loader = one.Loader();
  MediumReport report;
  std::optional<size_t> walk = loader.Load(report, /*verify_later=*/true, 64u << 20);
  REQUIRE(walk.has_value());
  CHECK(*walk == 0);
  Handed h = Drain(loader);
  CHECK(h.unverified == 3);  // no file looked at yet
  CHECK(h.blocks == 0);
  CHECK(loader.HeldBytes() > 0);  // the entries, kept for the walk

  size_t same = 0, replaced = 0;
  std::vector<JournalRecord> journal;
  MediumUpkeep::WalkItem item;
  while (loader.NextWalkItem(item)) {
    REQUIRE(item.region_id.has_value());  // every file is one INDEX names
    std::optional<JournalRecord> read;
    Verdict v = loader.CheckWalkItem(item, read);
    if (v.kind == Verdict::Kind::kSame) {
      same++;
      CHECK_FALSE(read.has_value());
    } else {
      REQUIRE(v.kind == Verdict::Kind::kReplaced);
      replaced++;
      CHECK(v.info.address == AddressOf(Block(3)));
      // What the store indexes the replacement under (a BlockInfo is an IndexedBlock): the keys
      // of the identity in the file's header, as at its commit.
      CHECK(v.info.keys == IndexKeysOf(Block(3), EncodePhysicalKey(Block(3))));
      REQUIRE(read.has_value());
      journal.push_back(*read);
    }
  }
  CHECK(same == 2);
  CHECK(replaced == 1);
  REQUIRE(journal.size() == 1);
  struct stat now {};
  REQUIRE(::stat(three.c_str(), &now) == 0);
  CHECK(journal[0].entry.inode == now.st_ino);  // the next start trusts the new file
  CHECK(journal[0].entry.size == 1003u);
  MediumReport walked = loader.EndWalk(/*completed=*/true, MediumUpkeep::WalkCounts{.loaded = 3});
  CHECK(walked.blocks_loaded == 3);
  // Freed, not just emptied: a daemon kept 4 B per block of them for its life.
  CHECK(loader.HeldBytes() == 0);
  // The walk is over: a check of one block has nothing left to check against.
  std::optional<JournalRecord> read;
  CHECK(loader.VerifyBlock(AddressOf(Block(3)), three, read).kind == Verdict::Kind::kSame);
  CHECK_FALSE(read.has_value());
}

TEST_CASE("Index entries: a committed block and its INDEX entry convert both ways without loss") {
  IndexedBlock b;
  b.address = AddressOf(Block(1));
  b.size = 4096;
  b.commit_epoch = 7;
  b.region_id = 42;
  b.owner = Owner{1000, 1001};
  b.commit_time_ns = 123456789;
  b.keys = IndexKeysOf(Block(1), EncodePhysicalKey(Block(1)));
  b.keys.identity = {};  // not kept in INDEX: the address stands for it
  SnapshotEntry e = EntryOf(b);
  CHECK(FormatBlockName(e.block) == b.address.block);
  CHECK(e.inode == 0);  // the file's stat is INDEX's to take when it is written
  IndexedBlock back;
  FillFromEntry(back, e);
  back.address = b.address;
  CHECK(back.size == b.size);
  CHECK(back.commit_epoch == b.commit_epoch);
  CHECK(back.region_id == b.region_id);
  CHECK(back.owner == b.owner);
  CHECK(back.commit_time_ns == b.commit_time_ns);
  CHECK(back.keys == b.keys);
  FileStat st;
  st.inode = 99;
  st.size = 5000;
  st.ctime_sec = 1;
  st.ctime_nsec = 2;
  SnapshotEntry full = EntryOf(b, BlockDigest{1}, st);
  CHECK(full.inode == 99);
  CHECK(full.file_size == 5000);
  CHECK(full.digest == BlockDigest{1});
}

}  // namespace
}  // namespace gpucache
