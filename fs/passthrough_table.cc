#include "fs/passthrough_table.h"

namespace gpucache {

int PassthroughTable::Open(uint64_t ino, uint64_t region_id, const FindCopy& find,
                           BackingFiles& backing) {
  MutexLock lock(mu_);
  Entry& e = entries_[ino];
  if (e.daemon == 0 && e.passthrough == 0) return OpenFirstLocked(e, region_id, find, backing);
  if (e.passthrough > 0 && e.region_id == region_id) {
    e.passthrough++;
    counts_.passthrough_handles++;
    counts_.passthrough_opens++;
    return e.backing_id;
  }
  // Opens served by the daemon are outstanding (the kernel would refuse a passthrough one), or
  // the passthrough opens are of an older block at this inode: served by the daemon. In the
  // second case the kernel refuses it (EIO; the caller recomputes) until those files close: it
  // will not serve one inode from two backing files, and the old copy's bytes are not this
  // block's.
  e.daemon++;
  counts_.daemon_handles++;
  return 0;
}

int PassthroughTable::OpenFirstLocked(Entry& e, uint64_t region_id, const FindCopy& find,
                                      BackingFiles& backing) {
  std::shared_ptr<const RamCopy> copy = find ? find() : nullptr;
  int id = copy ? backing.Open(copy->fd()) : 0;
  if (copy && id <= 0) counts_.backing_refusals++;
  if (id <= 0) {
    e.daemon = 1;
    counts_.daemon_handles++;
    return 0;
  }
  e = Entry{region_id, id, std::move(copy), 1, 0};
  counts_.passthrough_handles++;
  counts_.passthrough_opens++;
  counts_.backing_files++;
  return id;
}

bool PassthroughTable::Release(uint64_t ino, int backing_id, BackingFiles& backing) {
  MutexLock lock(mu_);
  auto it = entries_.find(ino);
  if (it == entries_.end()) return false;
  bool last_daemon = false;
  Entry& e = it->second;
  if (backing_id > 0 && e.passthrough > 0 && e.backing_id == backing_id) {
    counts_.passthrough_handles--;
    if (--e.passthrough == 0) {
      backing.Close(e.backing_id);  // the kernel let go of the inode's backing file already
      counts_.backing_files--;
      e.backing_id = 0;
      e.copy.reset();
    }
  } else if (backing_id == 0 && e.daemon > 0) {
    counts_.daemon_handles--;
    last_daemon = --e.daemon == 0;
  }
  if (e.passthrough == 0 && e.daemon == 0) entries_.erase(it);
  return last_daemon;
}

bool PassthroughTable::ServedByDaemon(uint64_t ino) const {
  MutexLock lock(mu_);
  auto it = entries_.find(ino);
  return it != entries_.end() && it->second.daemon > 0;
}

bool PassthroughTable::KernelRefusesBackingFiles() const {
  MutexLock lock(mu_);
  return counts_.backing_refusals >= kRefusalsBeforeOff && counts_.passthrough_opens == 0;
}

PassthroughTable::Counts PassthroughTable::counts() const {
  MutexLock lock(mu_);
  return counts_;
}

}  // namespace gpucache
