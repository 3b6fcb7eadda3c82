// Copies blocks into the RAM tier in the background, once an open the daemon served is released
// (adr/0020: promote on read) and, with `[ram] promote = "commit"`, once a block is committed.
// One thread and a bounded queue: at most kMaxQueued blocks, and no more bytes than the tier
// holds (more would only evict copies made from the same queue). A block asked for while the
// queue is full is not copied this time (its next open asks again) and is counted as skipped;
// no reader ever waits on the queue. The bound was 16 blocks, which a single engine's load of
// a long prefix exceeds: its tail was served by the daemon again on the next load.
//
// The copy is made through a reader the worker opens itself when it gets to the block (a block
// that left meanwhile, or was replaced, is skipped). That reader is neither a use nor an open
// reader (BlockStore::OpenForCopy): the block is evicted in its turn, the copy reads on from the
// file it opened, and a copy of a block that left while it was made is not kept.
//
// Thread safety: Enqueue may be called from any thread. Start and Stop from one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "store/block_store.h"
#include "store/mutex.h"
#include "store/ram_tier.h"

namespace gpucache {

class RamPromoter {
 public:
  // A queue entry is an address (about 150 bytes): 1,024 of them cost little, and cover the
  // blocks of several engines' loads at once.
  static constexpr size_t kMaxQueued = 1024;

  RamPromoter(BlockReads& store, RamTier& tier, size_t max_queued = kMaxQueued);
  ~RamPromoter() { Stop(); }
  RamPromoter(const RamPromoter&) = delete;
  RamPromoter& operator=(const RamPromoter&) = delete;

  // Called on the worker's thread after each copy kept, with the inode Enqueue was given.
  // REQUIRES: the worker is not running.
  void SetCopiedHandler(std::function<void(uint64_t ino)> handler) { copied_ = std::move(handler); }
  // Starts the worker (after the daemon detached: a fork keeps no thread).
  void Start() EXCLUDES(mu_);
  // Stops the worker; what is queued is dropped.
  void Stop() EXCLUDES(mu_);
  // Asks for a copy of the block at `address` (at `region_id`; none: whichever block is there
  // when the worker gets to it), of `bytes` bytes, whose inode is `ino` (0: none known). False
  // if it is queued already, the queue is full (counted in Skipped), or the worker is not running.
  bool Enqueue(const BlockAddress& address, std::optional<uint64_t> region_id, uint64_t bytes,
               uint64_t ino = 0) EXCLUDES(mu_);
  // Bytes of the blocks queued or being copied now.
  uint64_t QueuedBytes() const EXCLUDES(mu_);
  // Blocks queued or being copied now.
  size_t Pending() const EXCLUDES(mu_);
  // Asks not queued because the queue was full (blocks or bytes), since start.
  uint64_t Skipped() const EXCLUDES(mu_);
  // Copies not made because the machine's available memory would have fallen below the floor.
  uint64_t SkippedForMemory() const EXCLUDES(mu_);
  // The machine's available memory and the floor a copy must leave (defaults: MemAvailable
  // from /proc/meminfo, and 1/32 of MemTotal, at least 256 MiB). Tests give their own.
  // REQUIRES: the worker is not running.
  void SetMemoryGauge(std::function<uint64_t()> available, uint64_t floor) {
    available_ = std::move(available);
    memory_floor_ = floor;
  }

 private:
  struct Item {
    BlockAddress address;
    std::optional<uint64_t> region_id;
    uint64_t bytes = 0;
    uint64_t ino = 0;
  };
  void Run() EXCLUDES(mu_);
  void PromoteOne(const Item& item);

  BlockReads& store_;
  RamTier& tier_;
  const size_t max_queued_;
  const uint64_t max_queued_bytes_;
  std::function<void(uint64_t)> copied_;  // set while the worker is not running
  // A tmpfs copy is memory no reclaim frees (without swap): a tier set near MemTotal would end
  // in the OOM killer. Set while the worker is not running.
  std::function<uint64_t()> available_;
  uint64_t memory_floor_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<Item> queue_ GUARDED_BY(mu_);
  // RelativePath of every queued block and of the one being copied.
  std::unordered_set<std::string> queued_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;  // of the blocks in queued_
  uint64_t skipped_ GUARDED_BY(mu_) = 0;
  uint64_t skipped_memory_ GUARDED_BY(mu_) = 0;
  bool running_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucache
