// IndexedStore: the store's life: its start (Load, Restore) and its close.
#include "store/indexed_store.h"

#include <malloc.h>

namespace gpucache {

IndexedStore::IndexedStore(StoreOptions options, std::unique_ptr<Medium> medium)
    : StoreAdmin(std::move(options), std::move(medium)) {}

IndexedStore::~IndexedStore() {
  if (walker_.joinable()) {  // a walk still running stops: the medium leaves INDEX as a crash would
    walk_stop_.store(true);
    walker_.join();
  }
  WriteIndex(medium_->Close());
}

bool IndexedStore::Load(MediumReport& report, std::string& error) {
  bool loaded = medium_->Load(report, error);
  if (loaded) {
    epoch_.store(report.epoch);
    CountDamagedAtLoad(report);
    Found part;
    while (medium_->upkeep().NextFound(part)) {
      size_t restored = Restore(part);
      if (part.unverified) {  // counted here: the medium handed them over without a look
        report.blocks_loaded += restored;
        report.from_snapshot += restored;
      }
    }
  }
  // A load reads the snapshot, the journal or every header into buffers it frees again; glibc
  // keeps those pages resident in the heap's holes. Hand them back, so that the resident set
  // is what the index holds rather than the peak of the load.
  ::malloc_trim(0);
  if (loaded && medium_->upkeep().WalkPending()) {  // blocks restored unverified (adr/0016)
    walk_done_.store(false, std::memory_order_release);
    if (!options_.defer_background_work) StartBackgroundWork();
  }
  return loaded;
}

// Blocks the load found damaged never reach the index, but they are checksum failures all the
// same: gpucache_checksum_failures_total and its alert must hear of damage however it is found.
void IndexedStore::CountDamagedAtLoad(const MediumReport& report) {
  MutexLock lock(mu_);
  for (const auto& [tenant, n] : report.damaged) admission_.Counters(tenant).checksum_failures += n;
}

size_t IndexedStore::Restore(const Found& part) {
  MutexLock lock(mu_);  // once a part: a start restores millions
  if (part.expected_blocks != 0) {
    index_.Reserve(part.expected_blocks);
    admission_.Reserve(index_.size() + part.expected_blocks);  // ids are dense: below that many
  }
  for (const Found::Namespace& n : part.namespaces) index_.namespaces().Add(n.tenant, n.ns, n.owner);
  size_t restored = 0;
  for (size_t i = 0; i < part.count; ++i) {
    const IndexedBlock& b = part.blocks[i];
    // Blocks handed over unverified come straight from INDEX's entries, one per address.
    std::optional<BlockId> id = IndexLocked(b, part.stored, /*known_new=*/part.unverified);
    if (!id) continue;  // the medium hands over each block once: not reached
    if (part.unverified) unverified_.Add(*id);
    restored++;
  }
  if (part.unverified && restored != 0) walking_.store(true, std::memory_order_release);
  for (const Found::Quarantined& q : part.quarantined) {
    BlockInfo info = q.info;
    MustTransition(info.state, BlockState::kEvicting);
    uint64_t size = info.size;
    std::string tenant = info.address.tenant;
    if (quarantine_.Add({std::move(info), q.stored, 0, "restart", 0})) admission_.Quarantined(tenant, size);
  }
  return restored;
}

std::string IndexedStore::BackingPath(const BlockAddress& address) {
  return medium_->PathOf(address, StoredAt(address).get());
}

}  // namespace gpucache
