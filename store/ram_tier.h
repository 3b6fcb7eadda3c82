// RamTier: a bounded cache of verified copies of committed blocks, one file each in a directory
// on tmpfs, for the kernel to serve reads from without asking the daemon (FUSE passthrough,
// adr/0020).
//
// A copy is made through the store's verifying reader (Promote), so every byte in it passed its
// chunk's checksum on the way in; it is kept only once every byte is in. Its file has no name
// (O_TMPFILE, or created and unlinked at once): its memory goes back when the last descriptor
// closes, whoever holds it (the tier, an open passthrough file). The disk copy stays the
// authority: dropping a copy from RAM (least recently used first, to stay within the budget)
// costs nothing but the next open's speed.
//
// The budget is the tmpfs's size, and it counts what the tmpfs really holds: every copy whose
// file is still open anywhere, not only the copies the tier holds. A copy open as a backing file
// is never evicted to make room (dropping it would free nothing while its files are open); a
// copy the tier must drop while it is open (its block left, or was replaced, or the tier
// closed) stays counted until its last holder lets go. So a copy begun always fits the tmpfs.
//
// A copy is found by address *and* region id: a block replaced at the same address (evicted and
// committed again) has another region id and never matches the old copy. Forget drops the copy
// of a block that left the namespace; handles already found keep their descriptor.
//
// Thread safety: every method may be called from any thread; Promote copies without the lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "store/block_store.h"
#include "store/env.h"
#include "store/mutex.h"
#include "store/posix_io.h"

namespace gpucache {

// One verified copy of a block's payload: a descriptor of a nameless file of exactly `size`
// bytes. Never written once the tier holds it.
class RamCopy {
 public:
  RamCopy(Fd fd, uint64_t size, uint64_t region_id)
      : fd_(std::move(fd)), size_(size), region_id_(region_id) {}
  int fd() const { return fd_.get(); }
  uint64_t size() const { return size_; }
  uint64_t region_id() const { return region_id_; }

 private:
  const Fd fd_;
  const uint64_t size_;
  const uint64_t region_id_;
};

// Why copies begun were not kept: a chunk that failed its checksum (the block is damaged on
// disk), an I/O error, the tmpfs full (its size below [ram] bytes, or memory short), the block
// left while it was copied. An operator acts on each differently.
struct RamPromotionFailures {
  uint64_t checksum = 0, io = 0, no_space = 0, left = 0;
  uint64_t total() const { return checksum + io + no_space + left; }
  void Count(StatusCode why);
};

struct RamTierStats {
  uint64_t budget_bytes = 0;
  uint64_t bytes_held = 0;          // what the copies the tier holds take: whole 4 KiB pages
  uint64_t bytes_dropped_open = 0;  // copies dropped that open files still hold (still on tmpfs)
  uint64_t copies = 0;              // copies the tier holds
  uint64_t promotions = 0;          // copies made and kept
  RamPromotionFailures failed_by;   // copies begun and not kept, by why
  uint64_t too_large = 0;           // copies asked for of blocks larger than the whole budget
  uint64_t hits = 0;                // opens served from a copy (Touch)
  uint64_t evictions = 0;           // copies dropped to make room
  uint64_t forgotten = 0;           // copies dropped because their block left the namespace
};

class RamTier {
 public:
  static constexpr size_t kNoCopyLimit = SIZE_MAX;
  // `dir`: an open directory (on tmpfs in the daemon) where copies are made; the tier owns it.
  // Every file operation goes through `env`. `max_copies`: copies held (and in progress) at
  // most, each an open descriptor: the daemon bounds it by its descriptor limit, or a tenant's
  // many small blocks would take every descriptor the store needs. REQUIRES: dir.valid(),
  // budget_bytes > 0, max_copies > 0.
  RamTier(Fd dir, uint64_t budget_bytes, Env& env = Env::Posix(), size_t max_copies = kNoCopyLimit);
  RamTier(const RamTier&) = delete;
  RamTier& operator=(const RamTier&) = delete;

  // Copies the payload `reader` serves (each chunk verified as it is read) and keeps it as the
  // copy of `address` at `region_id`, dropping the least recently used copies for room first.
  // Nothing is kept unless every byte was copied. kOk; kExists (held, or being copied, at that
  // region); kTooLarge (larger than the budget: never held; counted); kExhausted (the budget is
  // taken by copies in progress, copies open as backing files and copies dropped while open); the
  // reader's refusal (kChecksumMismatch, kIoError, ...); kNoSpace (the tmpfs is full: memory
  // short); kNotFound (the block was forgotten while it was being copied).
  StatusCode Promote(const BlockAddress& address, uint64_t region_id, BlockReader& reader)
      EXCLUDES(mu_);
  // The copy of `address` at `region_id` (now the most recently used), or null. Counts no hit:
  // the open served from it says so with Touch (the kernel may still refuse the copy).
  std::shared_ptr<const RamCopy> Find(const BlockAddress& address, uint64_t region_id) EXCLUDES(mu_);
  // An open is served from the copy of `address` at `region_id` (the first open of its inode
  // and every open sharing its backing file): counted as a hit, and the copy, if the tier still
  // holds it, becomes the most recently used. A block held open by overlapping readers is the
  // hottest there is, and must not age to the least recently used end.
  void Touch(const BlockAddress& address, uint64_t region_id) EXCLUDES(mu_);
  // True if a block of `size` bytes is larger than the whole budget, counted in too_large:
  // Promote would refuse it, so nobody should queue it (each ask is counted once).
  bool NeverFits(uint64_t size) EXCLUDES(mu_);
  // True if a copy of `address` at `region_id` is held or being made (counts nothing).
  bool Holds(const BlockAddress& address, uint64_t region_id) EXCLUDES(mu_);
  // True if a copy of `address` at `region_id` is made and held: the next Find returns it
  // unless it is evicted or forgotten first (counts nothing, moves nothing).
  bool HasCopy(const BlockAddress& address, uint64_t region_id) EXCLUDES(mu_);
  // The block at `address` left the namespace: its copy goes, and a copy in progress is not kept.
  // With `region_id`, only a copy (or copy in progress) of that region: the block that left,
  // not one committed at the same address since.
  void Forget(const BlockAddress& address, std::optional<uint64_t> region_id = std::nullopt)
      EXCLUDES(mu_);
  // The tier will serve nothing more (the kernel refuses its copies): every copy goes, copies in
  // progress are not kept, and Promote refuses from now on (kNotSupported). Its memory is freed
  // as soon as no descriptor of a copy is open.
  void Close() EXCLUDES(mu_);
  RamTierStats Stats() const EXCLUDES(mu_);

 private:
  struct Entry {
    std::shared_ptr<const RamCopy> copy;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  struct InFlight {
    uint64_t region_id = 0;
    uint64_t bytes = 0;
    bool forgotten = false;  // Forget came while copying: the copy is not kept
  };

  // Claims room for a new copy of `key` taking `bytes` (whole pages) (dropping old copies as needed) and records it
  // as in flight; a status if it cannot be made.
  StatusCode BeginLocked(const std::string& key, uint64_t region_id, uint64_t bytes) REQUIRES(mu_);
  // Drops the least recently used copies no file holds open until `bytes` more fit beside the
  // copies in flight and those dropped while open.
  bool MakeRoomLocked(uint64_t bytes) REQUIRES(mu_);
  // The kept copy of `key` if it is of `region_id`, else null.
  Entry* CopyLocked(const std::string& key, uint64_t region_id) REQUIRES(mu_);
  // A copy of `bytes` more fits the budget (beside every copy still on the tmpfs) and the count.
  bool FitsLocked(uint64_t bytes) const REQUIRES(mu_);
  void DropLocked(std::unordered_map<std::string, Entry>::iterator it) REQUIRES(mu_);
  // Ends the copy of `key` in flight: kept (if `copy` and not forgotten meanwhile) or not.
  StatusCode EndLocked(const std::string& key, std::shared_ptr<const RamCopy> copy) REQUIRES(mu_);
  // A nameless file in the tier's directory holding the payload `reader` serves.
  Result<Fd> CopyOut(BlockReader& reader, uint64_t size) const;
  // Footprint of every kept copy whose file is still open (held by the tier or not), shared with
  // the copies' deleters: the last holder of a copy takes its bytes off, from any thread and
  // maybe after the tier is gone, so it is an atomic of its own rather than under mu_.
  using LiveBytes = std::atomic<uint64_t>;
  // The copy of a finished file: its footprint is live until its last holder lets go.
  std::shared_ptr<const RamCopy> MakeCopy(Fd fd, uint64_t size, uint64_t region_id) const;

  Env& env_;
  const Fd dir_;
  const uint64_t budget_;
  const size_t max_copies_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> copies_ GUARDED_BY(mu_);  // by BlockAddress::RelativePath
  std::list<std::string> lru_ GUARDED_BY(mu_);                     // most recently used first
  std::unordered_map<std::string, InFlight> in_flight_ GUARDED_BY(mu_);
  uint64_t in_flight_bytes_ GUARDED_BY(mu_) = 0;
  const std::shared_ptr<LiveBytes> live_bytes_ = std::make_shared<LiveBytes>(0);
  // The same for descriptors: every kept copy whose file is still open, each holding one
  // (review, 2026-12-07: copies dropped while open were left out of max_copies, so a tenant
  // holding opens of unlinked blocks took the daemon's descriptors from the others).
  const std::shared_ptr<std::atomic<size_t>> live_files_ = std::make_shared<std::atomic<size_t>>(0);
  bool closed_ GUARDED_BY(mu_) = false;
  RamTierStats stats_ GUARDED_BY(mu_);
};

}  // namespace gpucache
