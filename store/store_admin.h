// StoreAdmin: the store's role for upkeep and operators (BlockAdmin, store/block_store.h):
// invalidation and eviction, pins, fences, quarantine and reclaim, drains, fault domains,
// limits, counters and observers. A layer of IndexedStore over StoreCore (store/store_core.h).
#pragma once

#include "store/store_reads.h"

namespace gpucache {

class StoreAdmin : public StoreReads, public virtual BlockAdmin {
 public:
  StatusCode Invalidate(const BlockAddress& address) override;
  StatusCode Evict(const BlockAddress& address) override;
  StatusCode SetPinned(const BlockAddress& address, bool pinned) override;
  Result<uint64_t> Fence() override;
  std::vector<QuarantineInfo> ListQuarantine() override;
  Result<QuarantineInfo> StatQuarantine(uint64_t region_id) override;
  StatusCode ReclaimDrained(uint64_t region_id) override;
  Result<uint64_t> ReclaimFenced(uint64_t epoch) override;
  StatusCode Drain(DrainAction action) override;
  StatusCode IsolateDomain(const std::string& path) override;
  std::vector<DomainInfo> Domains() override;

  uint64_t Epoch() override;
  StoreStats Stats() override;
  void SetLimits(ResourceLimits limits) override;
  void SetRemovalObserver(RemovalObserver observer) override;
  void SetAutomaticFenceObserver(AutomaticFenceObserver observer) override;
  void SetBackingReadErrorObserver(BackingReadErrorObserver observer) override;
  void SetCommitObserver(CommitObserver observer) override {
    commit_observer_ = std::move(observer);
  }
  void SetInvalidationObserver(InvalidationObserver observer) override {
    invalidation_observer_ = std::move(observer);
  }

 protected:
  using StoreReads::StoreReads;
};

}  // namespace gpucache
