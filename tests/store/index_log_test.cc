// IndexLog (store/index_log.h): the index files of one data directory, over the real
// filesystem: what a rotation leaves, what a start keeps of a torn journal, and what an INDEX
// written from memory keeps of entries whose files are gone.
#include "store/index_log.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/support/fault_env.h"
#include "tests/support/temp_dir.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;

JournalRecord Record(uint8_t k) {
  JournalRecord r;
  r.ns = "acme/ns-00000000000000000000000000000000";
  r.entry.block[0] = k;
  r.entry.size = 100u + k;
  return r;
}

// The records a start would replay from JOURNAL.old (`old`) or JOURNAL.
size_t Replayed(IndexLog& log, bool old, IndexLog::JournalRead* read = nullptr) {
  IndexSnapshot empty;
  JournalReplay replay(empty);
  IndexLog::JournalRead r = log.ReplayJournal(replay, old);
  if (read) *read = r;
  return replay.records();
}

TEST_CASE("IndexLog: a rotation moves the journal aside for INDEX, and appends go on in a fresh one") {
  test::TempDir tmp;
  IndexLog log(Env::Posix(), DataDir(tmp.path()));
  log.Empty();
  for (uint8_t k = 0; k < 10; ++k) REQUIRE(log.Append(Record(k)) == StatusCode::kOk);
  const uint64_t bytes = log.JournalBytes();
  REQUIRE(bytes > 0);
  CHECK(log.Rotate(bytes) == IndexLog::Rotation::kNotDue);  // not past the limit
  CHECK(Replayed(log, /*old=*/true) == 0);
  REQUIRE(log.Rotate(bytes - 1) == IndexLog::Rotation::kRotated);
  CHECK(log.JournalBytes() == 0);
  CHECK(Replayed(log, /*old=*/true) == 10);  // until INDEX is written, a start replays these
  uint64_t after = 0;
  REQUIRE(log.Append(Record(10), &after) == StatusCode::kOk);
  CHECK(after == log.JournalBytes());
  CHECK(after > 0);
  CHECK(Replayed(log, /*old=*/false) == 1);
  log.EndRotation(/*written=*/true);
  CHECK_FALSE(fs::exists(tmp.path() + "/JOURNAL.old"));
  CHECK(Replayed(log, /*old=*/false) == 1);
}

// Review of stop 44: a second fold could rotate while the first was still writing its INDEX
// (seconds at millions of blocks), renaming JOURNAL over JOURNAL.old, whose records no INDEX held
// yet; and a rotation whose INDEX failed still removed JOURNAL.old.
TEST_CASE("IndexLog: one rotation at a time, and JOURNAL.old stays until an INDEX was written") {
  test::TempDir tmp;
  IndexLog log(Env::Posix(), DataDir(tmp.path()));
  log.Empty();
  for (uint8_t k = 0; k < 10; ++k) REQUIRE(log.Append(Record(k)) == StatusCode::kOk);
  const uint64_t limit = log.JournalBytes() - 1;
  REQUIRE(log.Rotate(limit) == IndexLog::Rotation::kRotated);
  for (uint8_t k = 10; k < 30; ++k) REQUIRE(log.Append(Record(k)) == StatusCode::kOk);
  CHECK(log.Rotate(limit) == IndexLog::Rotation::kNotDue);  // the first one's INDEX is not written
  CHECK(Replayed(log, /*old=*/true) == 10);
  log.EndRotation(/*written=*/false);  // its INDEX failed
  CHECK(Replayed(log, /*old=*/true) == 10);
  CHECK(Replayed(log, /*old=*/false) == 20);
  // The next rotation writes INDEX again, over both files as they are.
  REQUIRE(log.Rotate(limit) == IndexLog::Rotation::kRotated);
  CHECK(Replayed(log, /*old=*/true) == 10);
  CHECK(Replayed(log, /*old=*/false) == 20);
  log.EndRotation(/*written=*/true);
  CHECK_FALSE(fs::exists(tmp.path() + "/JOURNAL.old"));
  CHECK(Replayed(log, /*old=*/false) == 20);
}

TEST_CASE("IndexLog: keeping a journal cuts its torn tail before appending to it") {
  test::TempDir tmp;
  {
    IndexLog log(Env::Posix(), DataDir(tmp.path()));
    log.Empty();
    for (uint8_t k = 0; k < 3; ++k) REQUIRE(log.Append(Record(k)) == StatusCode::kOk);
  }
  std::ofstream(tmp.path() + "/JOURNAL", std::ios::app) << "torn";
  IndexLog log(Env::Posix(), DataDir(tmp.path()));
  IndexLog::JournalRead read;
  REQUIRE(Replayed(log, false, &read) == 3);
  REQUIRE(read.torn);
  const JournalRecord extra[] = {Record(7)};
  REQUIRE(log.Keep(read, extra));
  REQUIRE(log.Append(Record(8)) == StatusCode::kOk);
  IndexLog::JournalRead again;
  CHECK(Replayed(log, false, &again) == 5);  // 3 kept, the one appended by Keep, one after
  CHECK_FALSE(again.torn);
  CHECK(log.JournalBytes() == again.valid_bytes);
}

TEST_CASE("IndexLog: an INDEX written from memory leaves out entries whose files are gone") {
  test::TempDir tmp;
  IndexLog log(Env::Posix(), DataDir(tmp.path()));
  IndexSnapshot index;
  index.namespaces = {"acme/ns-00000000000000000000000000000000"};
  for (uint8_t k = 0; k < 2; ++k) {
    SnapshotEntry& e = index.entries.emplace_back();
    e.ns = 0;
    e.block[0] = k;
    e.size = 5;
  }
  fs::create_directories(tmp.path() + "/blocks/acme/ns-00000000000000000000000000000000");
  std::ofstream(tmp.path() + "/blocks/acme/ns-00000000000000000000000000000000/" + FormatBlockName(index.entries[0].block)) << "x";
  REQUIRE(log.StampAndWrite(index));
  std::optional<IndexSnapshot> read = log.ReadIndex();
  REQUIRE(read);
  REQUIRE(read->entries.size() == 1);  // the second block has no file
  CHECK(read->entries[0].block == index.entries[0].block);
  CHECK(read->entries[0].file_size == 1);  // stamped with its file's stat
  CHECK(read->entries[0].inode != 0);
}

// A clean close leaves an empty JOURNAL, which every start replays: reserving "one more entry"
// for it used to reallocate and copy all of INDEX's entries (a full vector has no spare room).
TEST_CASE("IndexLog: replaying an empty journal leaves INDEX's entries where they are") {
  test::TempDir tmp;
  IndexLog log(Env::Posix(), DataDir(tmp.path()));
  log.Empty();  // JOURNAL exists, 0 bytes
  IndexSnapshot index;
  index.namespaces = {"acme/ns-00000000000000000000000000000000"};
  index.entries.resize(1000);
  index.entries.shrink_to_fit();
  for (uint32_t i = 0; i < index.entries.size(); ++i) index.entries[i].block[0] = static_cast<uint8_t>(i);
  const SnapshotEntry* before = index.entries.data();
  JournalReplay replay(index);
  IndexLog::JournalRead read = log.ReplayJournal(replay, /*old=*/false);
  CHECK(read.exists);
  CHECK(replay.records() == 0);
  CHECK(index.entries.data() == before);  // not copied
}

// Each replayed record is an entry in memory until the start ends, so a planted or runaway
// JOURNAL of valid records must not decide what a start allocates: past the bound (a quarter
// of memory; here three records' worth) the replay stops and calls the journal unreadable, so
// the start checks every file rather than trusting INDEX, and keeps no part of the journal.
TEST_CASE("IndexLog: a journal longer than a start replays is cut at the bound and unreadable") {
  test::TempDir tmp;
  uint64_t record_bytes = EncodeJournalRecord(Record(0)).size();
  {
    IndexLog writer(Env::Posix(), DataDir(tmp.path()));
    writer.Empty();
    for (uint8_t k = 0; k < 10; ++k) REQUIRE(writer.Append(Record(k)) == StatusCode::kOk);
  }
  IndexLog log(Env::Posix(), DataDir(tmp.path()), /*most_replayed=*/3 * record_bytes + 7);
  IndexLog::JournalRead read;
  CHECK(Replayed(log, /*old=*/false, &read) == 3);
  CHECK(read.exists);
  CHECK_FALSE(read.readable);
  CHECK(read.valid_bytes == 3 * record_bytes);
  // The bound is of both files together (review of stop 44: each had its own quarter of
  // memory): JOURNAL.old's records count against what JOURNAL may add.
  fs::copy_file(tmp.path() + "/JOURNAL", tmp.path() + "/JOURNAL.old");  // 10 records each
  IndexLog both(Env::Posix(), DataDir(tmp.path()), /*most_replayed=*/12 * record_bytes);
  IndexSnapshot empty;
  JournalReplay replay(empty);
  IndexLog::JournalRead old_read = both.ReplayJournal(replay, /*old=*/true);
  IndexLog::JournalRead new_read = both.ReplayJournal(replay, /*old=*/false);
  CHECK(old_read.readable);
  CHECK_FALSE(new_read.readable);
  CHECK(replay.records() == 12);
  fs::remove(tmp.path() + "/JOURNAL.old");
  // Within the bound, the same journal replays whole.
  IndexLog roomy(Env::Posix(), DataDir(tmp.path()), /*most_replayed=*/10 * record_bytes);
  CHECK(Replayed(roomy, /*old=*/false, &read) == 10);
  CHECK(read.readable);
  CHECK_FALSE(read.torn);
}

// Regression: a JOURNAL that Empty or a rotation could not open
// stayed closed for the daemon's life, and every Append after it answered kOk having written
// nothing: no error counted, no record for the next start. Now each Append opens it again
// first, and a record it cannot write is an error.
TEST_CASE("IndexLog: a JOURNAL that could not be opened is opened by the next append, and a record not written is an error") {
  using Op = test::FaultEnv::Op;
  test::TempDir tmp;
  test::FaultEnv env;
  IndexLog log(env, DataDir(tmp.path()));
  env.FailNext(Op::kOpenAppend, test::FaultEnv::Fault::kIoError);  // Empty's open
  env.FailNext(Op::kOpenAppend, test::FaultEnv::Fault::kIoError);  // the first append's
  log.Empty();
  CHECK(log.Append(Record(0)) == StatusCode::kIoError);
  CHECK(log.Append(Record(1)) == StatusCode::kOk);  // opened again
  CHECK(Replayed(log, /*old=*/false) == 1);
  CHECK(log.JournalBytes() == EncodeJournalRecord(Record(1)).size());
  // The same after a rotation that could not open a fresh JOURNAL.
  env.FailNext(Op::kOpenAppend, test::FaultEnv::Fault::kNoSpace);
  REQUIRE(log.Rotate(0) == IndexLog::Rotation::kNoJournal);
  log.EndRotation(/*written=*/true);
  CHECK(log.Append(Record(2)) == StatusCode::kOk);
  CHECK(Replayed(log, /*old=*/false) == 1);
}

// Regression (2026-12-07): an append that failed part-way (a full device) left a torn record in
// JOURNAL, where a start's replay stops, so every record appended after it was lost to the next
// start as well, with only the first failure counted.
TEST_CASE("IndexLog: a record torn by a failed append is cut off, and the records after it replay") {
  using Op = test::FaultEnv::Op;
  test::TempDir tmp;
  test::FaultEnv env;
  IndexLog log(env, DataDir(tmp.path()));
  log.Empty();
  REQUIRE(log.Append(Record(0)) == StatusCode::kOk);
  env.FailNext(Op::kAppend, test::FaultEnv::Fault::kShortWrite);  // half the record written
  CHECK(log.Append(Record(1)) == StatusCode::kNoSpace);
  CHECK(log.Append(Record(2)) == StatusCode::kOk);
  IndexLog::JournalRead read;
  CHECK(Replayed(log, /*old=*/false, &read) == 2);
  CHECK_FALSE(read.torn);
  CHECK(log.JournalBytes() ==
        EncodeJournalRecord(Record(0)).size() + EncodeJournalRecord(Record(2)).size());
  // And if the torn record cannot be cut off, the next record opens JOURNAL again and cuts it
  // then, keeping the records before it (a later start needs them).
  env.FailNext(Op::kAppend, test::FaultEnv::Fault::kShortWrite);
  env.FailNext(Op::kTruncate, test::FaultEnv::Fault::kShortWrite);
  CHECK(log.Append(Record(3)) == StatusCode::kNoSpace);
  CHECK(log.Append(Record(4)) == StatusCode::kOk);
  CHECK(Replayed(log, /*old=*/false, &read) == 3);
  CHECK_FALSE(read.torn);
}

// Regression (review, 2026-12-07): a start that verifies in the background keeps JOURNAL
// (Keep); when that failed, the next append opened JOURNAL emptied, dropping the records INDEX
// lacks, so a start after a crash read those blocks in full (misses until its walk got there).
TEST_CASE("IndexLog: a journal that could not be kept is opened again with its records") {
  using Op = test::FaultEnv::Op;
  test::TempDir tmp;
  {
    IndexLog log(Env::Posix(), DataDir(tmp.path()));
    log.Empty();
    for (uint8_t k = 0; k < 3; ++k) REQUIRE(log.Append(Record(k)) == StatusCode::kOk);
  }
  std::ofstream(tmp.path() + "/JOURNAL", std::ios::app) << "torn";
  test::FaultEnv env;
  IndexLog log(env, DataDir(tmp.path()));
  IndexLog::JournalRead read;
  REQUIRE(Replayed(log, false, &read) == 3);
  env.FailNext(Op::kOpenAppend, test::FaultEnv::Fault::kIoError);
  CHECK_FALSE(log.Keep(read, {}));
  CHECK(log.Append(Record(4)) == StatusCode::kOk);
  IndexLog::JournalRead again;
  CHECK(Replayed(log, false, &again) == 4);  // the 3 kept (the torn tail cut), one after
  CHECK_FALSE(again.torn);
}

// ReadIndex takes INDEX whole through Env::ReadWhole: the POSIX Env maps it, another Env (here
// one that injects faults) gets the default copy through its own Read, so its faults reach it.
TEST_CASE("IndexLog: INDEX reads the same mapped or copied, and an INDEX that cannot be read is none") {
  test::TempDir tmp;
  IndexSnapshot index;
  index.namespaces = {"acme/ns-00000000000000000000000000000000", "globex/other"};
  for (uint8_t k = 0; k < 200; ++k) {
    SnapshotEntry& e = index.entries.emplace_back();
    e.ns = k % 2;
    e.block[0] = k;
    e.size = 1000u + k;
    e.inode = 7u + k;
  }
  REQUIRE(IndexLog(Env::Posix(), DataDir(tmp.path())).Write(index));
  std::optional<IndexSnapshot> mapped = IndexLog(Env::Posix(), DataDir(tmp.path())).ReadIndex();
  REQUIRE(mapped);
  CHECK(*mapped == index);
  test::FaultEnv faults;
  std::optional<IndexSnapshot> copied = IndexLog(faults, DataDir(tmp.path())).ReadIndex();
  REQUIRE(copied);
  CHECK(*copied == index);
  const std::vector<test::FaultEnv::Op> ops = faults.ops();
  CHECK(std::count(ops.begin(), ops.end(), test::FaultEnv::Op::kRead) == 1);  // one copy, whole
  faults.FailNext(test::FaultEnv::Op::kRead, test::FaultEnv::Fault::kIoError);
  CHECK_FALSE(IndexLog(faults, DataDir(tmp.path())).ReadIndex());
  // An empty file is no INDEX either (too short to hold its checksum), mapped or not.
  std::ofstream(tmp.path() + "/INDEX", std::ios::trunc);
  CHECK_FALSE(IndexLog(Env::Posix(), DataDir(tmp.path())).ReadIndex());
}

}  // namespace
}  // namespace gpucache
