#include "fs/ram_promoter.h"

#include <algorithm>

#include "fs/log.h"
#include "fs/meminfo.h"

namespace gpucache {
namespace {

// Unknown (no /proc): no gate, as before.
uint64_t MemAvailableBytes() { return MemInfoBytes("MemAvailable:").value_or(UINT64_MAX); }

uint64_t DefaultMemoryFloor() {
  return std::max<uint64_t>(uint64_t{256} << 20, MemInfoBytes("MemTotal:").value_or(0) / 32);
}

}  // namespace

RamPromoter::RamPromoter(BlockReads& store, RamTier& tier, size_t max_queued)
    : store_(store),
      tier_(tier),
      max_queued_(max_queued),
      max_queued_bytes_(tier.Stats().budget_bytes),
      available_(MemAvailableBytes),
      memory_floor_(DefaultMemoryFloor()) {}

void RamPromoter::Start() {
  MutexLock lock(mu_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void RamPromoter::Stop() {
  {
    MutexLock lock(mu_);
    running_ = false;
    queue_.clear();  // the worker empties queued_ (and its bytes) as it ends
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool RamPromoter::Enqueue(const BlockAddress& address, std::optional<uint64_t> region_id, uint64_t bytes,
                          uint64_t ino) {
  {
    MutexLock lock(mu_);
    if (!running_) return false;
    std::string key = address.RelativePath();
    if (queued_.contains(key)) return false;
    // A block larger than this bound alone still goes through (RamServing queues none larger
    // than the whole tier: RamTier::NeverFits).
    const bool over_bytes = !queued_.empty() && queued_bytes_ + bytes > max_queued_bytes_;
    if (queued_.size() >= max_queued_ || over_bytes) {
      ++skipped_;
      return false;
    }
    queued_.insert(std::move(key));
    queued_bytes_ += bytes;
    queue_.push_back({address, region_id, bytes, ino});
  }
  wake_.notify_one();
  return true;
}

size_t RamPromoter::Pending() const {
  MutexLock lock(mu_);
  return queued_.size();
}

uint64_t RamPromoter::QueuedBytes() const {
  MutexLock lock(mu_);
  return queued_bytes_;
}

uint64_t RamPromoter::Skipped() const {
  MutexLock lock(mu_);
  return skipped_;
}

uint64_t RamPromoter::SkippedForMemory() const {
  MutexLock lock(mu_);
  return skipped_memory_;
}

void RamPromoter::Run() {
  MutexLock lock(mu_);
  for (;;) {
    while (running_ && queue_.empty()) wake_.wait(mu_);
    if (!running_) break;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    PromoteOne(item);
    lock.Lock();
    queued_.erase(item.address.RelativePath());
    queued_bytes_ -= item.bytes;
  }
  queued_.clear();
  queued_bytes_ = 0;
}

void RamPromoter::PromoteOne(const Item& item) {
  if (item.region_id && tier_.Holds(item.address, *item.region_id)) return;
  // The machine's memory first: the block stays served from disk, and its next open asks again.
  if (uint64_t available = available_(); available < memory_floor_ || available - memory_floor_ < item.bytes) {
    MutexLock lock(mu_);
    ++skipped_memory_;
    return;
  }
  Result<std::shared_ptr<BlockReader>> reader = store_.OpenForCopy(item.address);  // not a use: eviction order stays the readers'
  if (!reader.ok()) return;  // left
  const uint64_t region_id = reader.value()->info().region_id;
  if (item.region_id && region_id != *item.region_id) return;  // replaced
  StatusCode s = tier_.Promote(item.address, region_id, *reader.value());
  // The block may have left between OpenForCopy and the tier's start of the copy, when its
  // Forget found nothing to drop: a copy no open could ever find would hold budget until the
  // least recently used end reached it. Asked after the copy was kept, the store's answer
  // covers that window (a block leaves the store before the tier hears of it).
  if (s == StatusCode::kOk) {
    Result<BlockInfo> now = store_.StatAttributes(item.address);
    if (!now.ok() || now->region_id != region_id) {
      tier_.Forget(item.address, region_id);
    } else if (copied_) {
      copied_(item.ino);
    }
  }
  if (s != StatusCode::kOk && s != StatusCode::kExists) {
    // A checksum failure is logged by the removal observer, as for any reader.
    spdlog::debug("ram tier: {} not copied: {}", item.address.RelativePath(), ToString(s));
  }
}

}  // namespace gpucache
