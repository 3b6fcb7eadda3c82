// Which opens of a committed block the kernel serves from a RAM copy (FUSE passthrough) and which
// the daemon serves, inode by inode (adr/0020).
//
// The kernel refuses to mix the two on one inode (fs/fuse/iomode.c): an open served by the
// daemon of an inode open for passthrough, and a passthrough open of an inode with opens served
// by the daemon, both fail the caller's open(2) with EIO; and every passthrough open of an inode
// must name the same backing file. So, per inode: while an open served by the daemon is
// outstanding, every new open is served by the daemon too; while passthrough opens are
// outstanding, new opens of the same copy share their backing id; the backing id is closed when
// the last of them is released.
//
// Counts are taken at OPEN and given back at RELEASE, which the kernel sends only after it let go
// of the file on its side: the daemon's counts are never lower than the kernel's, so it never
// answers a mix the kernel would refuse (a count higher for a moment only serves an open by the
// daemon that passthrough could have served).
//
// Thread safety: all methods may be called concurrently. mu_ is taken before RamTier's lock (the
// copy is found under it) and held across the backing-file ioctls, which never wait on a FUSE
// request.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "store/mutex.h"
#include "store/ram_tier.h"

namespace gpucache {

// The kernel's table of backing files (FUSE_DEV_IOC_BACKING_OPEN/CLOSE), as the FUSE layer
// reaches it for one request (fs/fuse_ops.cc); tests put a fake here.
class BackingFiles {
 public:
  virtual ~BackingFiles() = default;
  // Registers `fd` as a backing file: its id (> 0), or 0 if the kernel refused.
  virtual int Open(int fd) = 0;
  virtual void Close(int backing_id) = 0;
};

class PassthroughTable {
 public:
  using FindCopy = std::function<std::shared_ptr<const RamCopy>()>;
  // An open of inode `ino`, whose block is at `region_id`: the backing id to answer with (> 0),
  // or 0 for an open the daemon serves. `find` is asked for the copy only when no open of the
  // inode is outstanding (null: none).
  int Open(uint64_t ino, uint64_t region_id, const FindCopy& find, BackingFiles& backing)
      EXCLUDES(mu_);
  // The RELEASE of an open that Open answered with `backing_id` (0: served by the daemon). True
  // when it was the inode's last open served by the daemon.
  bool Release(uint64_t ino, int backing_id, BackingFiles& backing) EXCLUDES(mu_);
  // Whether opens of `ino` served by the daemon are outstanding (its READs may be in flight).
  bool ServedByDaemon(uint64_t ino) const EXCLUDES(mu_);

  struct Counts {
    uint64_t passthrough_handles = 0;  // open now, served by the kernel from a copy
    uint64_t daemon_handles = 0;       // open now, served by the daemon
    uint64_t backing_files = 0;        // backing ids registered now (one per inode)
    uint64_t passthrough_opens = 0;    // opens answered with a backing id, ever
    uint64_t backing_refusals = 0;     // copies the kernel refused as backing files, ever
  };
  Counts counts() const EXCLUDES(mu_);
  // The kernel refused kRefusalsBeforeOff backing files and never took one: it will refuse
  // them all (it takes them only from a daemon with CAP_SYS_ADMIN in the initial user
  // namespace). One refusal is not enough: it may be passing (a full descriptor table, memory).
  static constexpr uint64_t kRefusalsBeforeOff = 4;
  bool KernelRefusesBackingFiles() const EXCLUDES(mu_);

 private:
  struct Entry {
    uint64_t region_id = 0;
    int backing_id = 0;  // while passthrough > 0
    std::shared_ptr<const RamCopy> copy;  // the registered file: kept open with its id
    uint32_t passthrough = 0;
    uint32_t daemon = 0;
  };
  // A first open of an inode with nothing outstanding: by passthrough if a copy is found and the
  // kernel takes it as a backing file.
  int OpenFirstLocked(Entry& e, uint64_t region_id, const FindCopy& find, BackingFiles& backing)
      REQUIRES(mu_);

  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ GUARDED_BY(mu_);  // inodes with opens outstanding
  Counts counts_ GUARDED_BY(mu_);
};

}  // namespace gpucache
