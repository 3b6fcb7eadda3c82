// IndexLog: the index files of one data directory, INDEX (store/index_snapshot.h) and the
// journal over it (store/index_journal.h), as FileMedium's part that owns them: where they are,
// how they are read at a start, appended to, rotated and rewritten. What goes into them (which
// blocks, when a start may keep a journal, when a fold is due) is FileMedium's to decide
// (snapshot_writer.cc, file_store_journal.cc; at a start, file_loader.cc). Every file
// operation goes through Env.
//
// Thread safety: Append, JournalBytes, Rotate, EndRotation, StampAndWrite and Empty may be called
// concurrently (mu_ guards the open JOURNAL); the start-up calls (Read*, Keep) run before the
// medium is shared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "store/data_dir.h"
#include "store/env.h"
#include "store/index_journal.h"
#include "store/index_snapshot.h"
#include "store/mutex.h"
#include "store/posix_io.h"

namespace gpucache {

// A quarter of the machine's memory: an INDEX, PINS or journal longer than this names more
// blocks than the index could hold (a block costs about as much in memory), so it is damaged or
// planted.
uint64_t MostMetadataBytes();

// The bytes of `path` (INDEX, PINS, EPOCH), or nothing if it cannot be read whole or is longer
// than a quarter of the machine's memory: a damaged or planted file can be any size, and its
// size must not decide what a start allocates.
std::optional<Bytes> ReadBounded(Env& env, const std::string& path);

class IndexLog {
 public:
  // `most_replayed`: the bytes of whole records a start replays from JOURNAL.old and JOURNAL
  // together before it calls the rest unreadable (default a quarter of the machine's memory,
  // as for INDEX: each record becomes an entry in memory); a test passes a small one.
  IndexLog(Env& env, DataDir dir, uint64_t most_replayed = MostMetadataBytes())
      : env_(env), dir_(std::move(dir)), most_replayed_(most_replayed) {}

  // --- Start-up.
  // INDEX, decoded; nothing if it is missing, unreadable or fails its checks.
  std::optional<IndexSnapshot> ReadIndex();
  // What replaying one journal file found.
  struct JournalRead {
    bool exists = false;
    bool readable = true;      // false: an error other than "not there", or more whole records
                               // than a start replays (most_replayed), cut the read short
    uint64_t valid_bytes = 0;  // the whole records at its start
    bool torn = false;         // something after them
    uint64_t size = 0;         // the file's size as read
  };
  // Replays JOURNAL.old (`old`) or JOURNAL into `replay`, in pieces through one buffer.
  JournalRead ReplayJournal(JournalReplay& replay, bool old);
  // Keeps JOURNAL as `read` found it (a torn tail cut) and appends `records` to it, appended to
  // from now on; false if that failed (the caller writes INDEX and empties it instead).
  bool Keep(const JournalRead& read, std::span<const JournalRecord> records);

  // --- Any time.
  // One record, one write (O_APPEND): a crash leaves whole records and at most one torn one.
  // With no JOURNAL open (an emptying or a rotation could not open one) a fresh one is opened
  // first; if that fails too, the record is not written and the open's error is returned, for
  // the caller to count. (No block is lost either way: a start finds the files no record names
  // by listing their directories and reads them in full.) `journal_bytes`, if given:
  // JournalBytes() after it, under the same lock (a commit asks whether a fold is due).
  StatusCode Append(const JournalRecord& record, uint64_t* journal_bytes = nullptr);
  // Bytes appended to JOURNAL since it was last emptied.
  uint64_t JournalBytes() const;
  // Past `limit` bytes: JOURNAL becomes JOURNAL.old and appends go to a fresh JOURNAL; the
  // caller then writes INDEX (StampAndWrite) and calls EndRotation. JOURNAL.old is replayed
  // before JOURNAL at a start until then. kNotDue (nothing done; also while another rotation's
  // INDEX is being written: a second rename would put JOURNAL over JOURNAL.old, whose records
  // no INDEX holds yet), kFailed (the rename failed: JOURNAL goes on growing, no record
  // dropped), kNoJournal (rotated, but no fresh JOURNAL could be opened: the next Append tries
  // again). After a rotation whose INDEX could not be written, the next call past the limit
  // answers kRotated without a rename: JOURNAL.old still holds what the last INDEX lacks, and
  // the caller writes INDEX again.
  enum class Rotation { kNotDue, kRotated, kNoJournal, kFailed };
  Rotation Rotate(uint64_t limit);
  // Ends the rotation: JOURNAL.old goes once INDEX was `written`; else it stays, replayed by
  // a start, and the next rotation writes INDEX again.
  void EndRotation(bool written);
  // Writes `index` as INDEX after taking each entry's file's stat (inode, size, ctime: what the
  // next start checks); entries whose file is gone are left out. Replaced by a rename, not
  // synced: a torn INDEX after a power cut fails its sum and costs one scan, nothing else.
  // False if INDEX could not be replaced (the old one stands).
  [[nodiscard]] bool StampAndWrite(IndexSnapshot index);
  // Writes `index` (entries stamped already) as INDEX; false as above.
  [[nodiscard]] bool Write(const IndexSnapshot& index);
  // Removes INDEX: the next start checks every file.
  void RemoveIndex() { env_.Remove(dir_.File(kSnapshotFile)); }
  // Empties JOURNAL (and drops JOURNAL.old), appended to from now on; if it cannot be opened,
  // the next Append tries again.
  void Empty();

 private:
  // Opens JOURNAL emptied as fd_ (invalid if that failed), nothing appended yet: the
  // descriptor, or -errno.
  int OpenEmpty() REQUIRES(mu_);
  // Opens JOURNAL again as fd_ keeping its first bytes_ (whole records; a torn tail after them
  // is cut): OK, or why not (fd_ then stays invalid).
  StatusCode OpenKept() REQUIRES(mu_);

  Env& env_;
  const DataDir dir_;
  const uint64_t most_replayed_;
  uint64_t replayed_ = 0;  // by ReplayJournal so far, both files: start-up only, no lock
  mutable Mutex mu_;
  Fd fd_ GUARDED_BY(mu_);               // JOURNAL, for appending
  uint64_t bytes_ GUARDED_BY(mu_) = 0;  // appended since it was last emptied
  // With no JOURNAL open: whether the next Append starts an empty one (after an emptying or a
  // rotation that could not open it) or keeps the bytes_ of records it holds (after a Keep or a
  // cut of a torn record that failed: a later start still needs them).
  bool reopen_empty_ GUARDED_BY(mu_) = true;
  // A rotation from Rotate to EndRotation (kWriting), or one whose INDEX failed (kUnwritten).
  enum class RotationState { kNone, kWriting, kUnwritten };
  RotationState rotation_ GUARDED_BY(mu_) = RotationState::kNone;
  // A journal is read at start in pieces of this size.
  static constexpr size_t kReplayPiece = 1 << 20;
};

}  // namespace gpucache
