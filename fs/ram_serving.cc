#include "fs/ram_serving.h"

#include <spdlog/spdlog.h>

namespace gpucache {

RamServing::RamServing(BlockReads& store, std::unique_ptr<RamTier> tier, bool promote_on_commit)
    : store_(store), promote_on_commit_(promote_on_commit), tier_(std::move(tier)), promoter_(store, *tier_) {}

void RamServing::Committed(const BlockAddress& address) {
  // Without passthrough a copy would never be served: nothing is copied (adr/0020, decision 6).
  if (!promote_on_commit_ || !passthrough()) return;
  // Whichever block is at the address when the worker gets to it (a replacement queued behind
  // this one would be refused as a duplicate); its size bounds the queue.
  Result<BlockInfo> info = store_.StatAttributes(address);
  if (info.ok() && !tier_->NeverFits(info->size)) promoter_.Enqueue(address, std::nullopt, info->size);
}

int RamServing::Open(uint64_t ino, const BlockInfo& info, BackingFiles& backing) {
  if (!passthrough()) return -1;
  const BlockAddress& a = info.address;
  int id = table_.Open(ino, info.region_id, [&] { return tier_->Find(a, info.region_id); }, backing);
  // Served from the copy, whether this open registered it or shares the inode's backing file: a
  // hit, and the copy is the most recently used (a block overlapping readers keep open never
  // ages to the LRU end). A copy the kernel refused (id 0) is neither.
  if (id > 0) tier_->Touch(a, info.region_id);
  // A kernel that refuses the first copies offered refuses every one: copying more blocks
  // would read each twice from disk and drop the pages its next open wants, for nothing.
  if (id == 0 && table_.KernelRefusesBackingFiles() && passthrough_.exchange(false)) {
    tier_->Close();  // copies made before this refusal would hold their memory for nothing
    spdlog::warn("RAM tier: the kernel refuses its copies as backing files (the daemon needs "
                 "CAP_SYS_ADMIN in the initial user namespace): passthrough is off for this "
                 "mount, its copies are dropped, and nothing more is copied");
  }
  return id;
}

void RamServing::SetDropPagesHandler(std::function<void(uint64_t ino)> drop) {
  drop_pages_ = std::move(drop);
  promoter_.SetCopiedHandler([this](uint64_t ino) { CopyKept(ino); });
}

// A copy kept: a daemon-served open that began before it was in the tier still counts here (its
// Open looked for the copy and counted itself in one step), so a drop is never sent under it.
void RamServing::CopyKept(uint64_t ino) {
  if (ino != 0 && !table_.ServedByDaemon(ino)) DropPages(ino);
}

void RamServing::DropPages(uint64_t ino) {
  if (!drop_pages_) return;
  page_drops_.fetch_add(1, std::memory_order_relaxed);
  drop_pages_(ino);
}

void RamServing::Release(uint64_t ino, int backing_id, const BlockInfo& info, BackingFiles& backing) {
  const bool last_daemon_open = table_.Release(ino, backing_id, backing);
  // An open the daemon served is done with the block: it is copied in the background for the
  // next open (promote on read). Not while it reads: the copy would read the same bytes from
  // the disk beside it, and a damaged block is then found by its reader first, as without the
  // tier (its EIO comes after the kernel forgot the name; a copy finding it meanwhile would not
  // hold the reader's EIO back).
  if (backing_id != 0) return;
  if (!passthrough()) return;  // turned off since this open (Open): a copy would never serve
  // Only a copy made: while it is being made the next open is still the daemon's, and would
  // read again what a drop now took away (found by a metrics test counting READs). The copy's
  // own end drops the pages then (CopyKept).
  if (last_daemon_open && tier_->HasCopy(info.address, info.region_id)) {  // copied while read
    DropPages(ino);
  } else if (!tier_->Holds(info.address, info.region_id) && !tier_->NeverFits(info.size)) {
    // A block larger than the whole tier is counted (too_large) and never queued: the worker
    // would open it and check it only to be refused.
    promoter_.Enqueue(info.address, info.region_id, info.size, ino);
  }
}

RamMetrics RamServing::Metrics() const {
  RamMetrics m;
  m.passthrough = passthrough();
  m.tier = tier_->Stats();
  m.opens = table_.counts();
  m.promotions_pending = promoter_.Pending();
  m.promotions_skipped = promoter_.Skipped();
  m.promotions_skipped_memory = promoter_.SkippedForMemory();
  m.page_drops = page_drops_.load(std::memory_order_relaxed);
  return m;
}

}  // namespace gpucache
