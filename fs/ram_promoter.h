// Copies blocks into the RAM tier in the background, once an open the daemon served is released
// (adr/0020: promote on read) and, with `[ram] promote = "commit"`, once a block is committed.
// One thread and a short queue: a block opened while the queue is full is simply not copied
// this time (its next open asks again), so a burst of opens never holds memory or readers in
// a queue.
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
  RamPromoter(BlockReads& store, RamTier& tier, size_t max_queued = 16)
      : store_(store), tier_(tier), max_queued_(max_queued) {}
  ~RamPromoter() { Stop(); }
  RamPromoter(const RamPromoter&) = delete;
  RamPromoter& operator=(const RamPromoter&) = delete;

  // Starts the worker (after the daemon detached: a fork keeps no thread).
  void Start() EXCLUDES(mu_);
  // Stops the worker; what is queued is dropped.
  void Stop() EXCLUDES(mu_);
  // Asks for a copy of the block at `address` (at `region_id`; none: whichever block is there
  // when the worker gets to it). False if it is queued already, the queue is full, or the
  // worker is not running.
  bool Enqueue(const BlockAddress& address, std::optional<uint64_t> region_id) EXCLUDES(mu_);
  // Blocks queued or being copied now.
  size_t Pending() const EXCLUDES(mu_);

 private:
  struct Item {
    BlockAddress address;
    std::optional<uint64_t> region_id;
  };
  void Run() EXCLUDES(mu_);
  void PromoteOne(const Item& item);

  BlockReads& store_;
  RamTier& tier_;
  const size_t max_queued_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<Item> queue_ GUARDED_BY(mu_);
  // RelativePath of every queued block and of the one being copied.
  std::unordered_set<std::string> queued_ GUARDED_BY(mu_);
  bool running_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucache
