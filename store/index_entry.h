// A committed block as the index lists it (IndexedBlock, store/medium.h) and its entry in INDEX
// and the journal (SnapshotEntry, store/index_snapshot.h): each conversion written once, for
// FileMedium and its loader.
#pragma once

#include "store/env.h"
#include "store/index_snapshot.h"
#include "store/medium.h"

namespace gpucache {

// The entry of `b` as the index knows it, its namespace left for the caller: the payload digest
// and the file's stat are zero (IndexLog::StampAndWrite stats the files of an INDEX written
// from memory).
SnapshotEntry EntryOf(const IndexedBlock& b);
// The entry of `b` with its payload's digest and its file's stat: a block just committed, or
// read in full at a start.
SnapshotEntry EntryOf(const IndexedBlock& b, BlockDigest digest, const FileStat& st);
// Every field of `b` but its address and `pinned`, from the entry.
void FillFromEntry(IndexedBlock& b, const SnapshotEntry& e);

}  // namespace gpucache
