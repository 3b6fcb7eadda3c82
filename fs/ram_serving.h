// The RAM tier as the FUSE side serves it (adr/0020): opens of blocks the tier holds are answered
// with a backing file the kernel reads from itself (FUSE passthrough, fs/passthrough_table.h);
// when an open the daemon served is released, its block is queued for a copy
// (fs/ram_promoter.h); blocks that leave the namespace are forgotten. Filesystem holds one when the tier is on (`[ram] bytes` > 0 and its
// tmpfs mounted); passthrough is on once INIT found the kernel offering it.
//
// Thread safety: all methods may be called concurrently, but Start and Stop from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "fs/passthrough_table.h"
#include "fs/ram_promoter.h"
#include "store/block_store.h"
#include "store/ram_tier.h"

namespace gpucache {

// What /metrics shows of the tier (all zero when it is off).
struct RamMetrics {
  bool passthrough = false;
  RamTierStats tier;
  PassthroughTable::Counts opens;
  size_t promotions_pending = 0;
  uint64_t promotions_skipped = 0;
  uint64_t promotions_skipped_memory = 0;
  uint64_t page_drops = 0;  // times SetDropPagesHandler's handler was called
};

class RamServing {
 public:
  // `promote_on_commit`: `[ram] promote = "commit"` (Committed queues a copy).
  RamServing(BlockReads& store, std::unique_ptr<RamTier> tier, bool promote_on_commit = false);

  // INIT's answer: the kernel serves passthrough opens from now on (false: the daemon serves
  // every read, nothing is copied). Turned off by Open once the kernel has refused
  // PassthroughTable::kRefusalsBeforeOff copies and taken none.
  void SetPassthrough(bool on) { passthrough_.store(on, std::memory_order_release); }
  bool passthrough() const { return passthrough_.load(std::memory_order_acquire); }
  // The worker that copies blocks; started once the daemon detached.
  void Start() { promoter_.Start(); }
  void Stop() { promoter_.Stop(); }
  // Tells the kernel to drop the pages of inode `ino` that daemon-served reads left in its cache
  // (fs/invalidator.h), called once a block has a RAM copy and no open of it is served by the
  // daemon: from then on its opens pass through, and the kernel would otherwise drop those
  // pages inside the first passthrough open (an open without keep_cache invalidates the
  // inode's mapping), a quarter of the speed for that read, holding the block twice in memory
  // until then. Never while a daemon-served open is outstanding: its READs (readahead
  // included) hold pages the drop would wait for. REQUIRES: the worker is not running.
  void SetDropPagesHandler(std::function<void(uint64_t ino)> drop);

  // An open of block inode `ino` (`info`: what the store's reader holds): the backing id to
  // answer with, 0 for an open the daemon serves, or -1 if the open is not counted here
  // (passthrough off; nothing to give back at release).
  int Open(uint64_t ino, const BlockInfo& info, BackingFiles& backing);
  // The release of an open Open answered with `backing_id` (>= 0); an open the daemon served
  // queues its block for a copy.
  void Release(uint64_t ino, int backing_id, const BlockInfo& info, BackingFiles& backing);
  // The block at `address` was just committed: with promote on commit, it is queued for a copy
  // (made from the bytes just written, verified as on read), so its first open passes through.
  void Committed(const BlockAddress& address);
  // The block at `address` left the namespace: new opens never find its copy.
  void Forget(const BlockAddress& address) { tier_->Forget(address); }
  RamMetrics Metrics() const;
  RamTier& tier() { return *tier_; }
  // Blocks queued or being copied (tests wait for 0).
  size_t PromotionsPending() const { return promoter_.Pending(); }

 private:
  void CopyKept(uint64_t ino);
  void DropPages(uint64_t ino);

  BlockReads& store_;
  std::function<void(uint64_t)> drop_pages_;  // set while the worker is not running
  std::atomic<uint64_t> page_drops_{0};
  std::atomic<bool> passthrough_{false};
  const bool promote_on_commit_;
  const std::unique_ptr<RamTier> tier_;
  PassthroughTable table_;
  RamPromoter promoter_;  // declared last: its thread stops before the tier goes
};

}  // namespace gpucache
