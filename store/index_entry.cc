#include "store/index_entry.h"

namespace gpucache {

SnapshotEntry EntryOf(const IndexedBlock& b) {
  SnapshotEntry e;
  e.block = ParseBlockName(b.address.block).value_or(BlockDigest{});
  e.size = b.size;
  e.commit_epoch = b.commit_epoch;
  e.region_id = b.region_id;
  e.uid = b.owner.uid;
  e.gid = b.owner.gid;
  e.commit_time_ns = b.commit_time_ns;
  e.keys = b.keys;
  return e;
}

SnapshotEntry EntryOf(const IndexedBlock& b, BlockDigest digest, const FileStat& st) {
  SnapshotEntry e = EntryOf(b);
  e.digest = digest;
  e.inode = st.inode;
  e.file_size = st.size;
  e.ctime_sec = st.ctime_sec;
  e.ctime_nsec = st.ctime_nsec;
  return e;
}

void FillFromEntry(IndexedBlock& b, const SnapshotEntry& e) {
  b.size = e.size;
  b.commit_epoch = e.commit_epoch;
  b.region_id = e.region_id;
  b.owner = Owner{e.uid, e.gid};
  b.commit_time_ns = e.commit_time_ns;
  b.keys = e.keys;
}

}  // namespace gpucache
