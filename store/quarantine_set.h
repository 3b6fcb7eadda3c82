// QuarantineSet: blocks out of the namespace whose bytes may still be in use (a handle was open
// when they left, or a restart found them quarantined). Only a drained attestation or a fenced
// reclaim frees one, never a timeout or a last close (docs/architecture.md, "Lifecycle").
//
// It keeps the entries and their reader counts; the store's counters and the medium's work on
// the bytes stay with the store (store/indexed_store.h).
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/block_store.h"
#include "store/medium.h"

namespace gpucache {

class QuarantineSet {
 public:
  struct Entry {
    BlockInfo info;  // without identity; info.state is QUARANTINED while it is here
    std::shared_ptr<StoredPayload> stored;
    int open_readers = 0;
    std::string reason;       // "evicted", "invalidated", "restart"
    uint64_t since_epoch = 0;
    // The medium is still moving the bytes (Medium::Quarantine, outside the store's lock):
    // `stored` is where they were, and no reclaim may take the entry until SetStored.
    bool moving = false;
  };

  // Adds a block leaving the namespace (state EVICTING), moving it to QUARANTINED. False, and
  // nothing changes, if its state cannot move there or its region is already here.
  bool Add(Entry entry);
  // The medium moved the bytes: their new medium state.
  void SetStored(uint64_t region_id, std::shared_ptr<StoredPayload> stored);
  // A reader of a quarantined block closed. Its last close does not free it.
  void ReaderClosed(uint64_t region_id);
  // Whether some quarantined block was at `address` (a "quarantined" miss).
  bool HoldsAddress(const BlockAddress& address) const;
  std::vector<QuarantineInfo> List() const;
  std::optional<QuarantineInfo> Stat(uint64_t region_id) const;
  // A drained attestation: takes the entry out (state ABSENT). kNotFound, or kBusy while a
  // reader of this process still has it open or its bytes are still moving.
  StatusCode TakeDrained(uint64_t region_id, Entry& out);
  // A fenced reclaim: takes out every entry quarantined before `epoch` (state ABSENT), but
  // those whose bytes are still moving (a later reclaim takes them).
  std::vector<Entry> TakeBefore(uint64_t epoch);
  size_t size() const { return by_region_.size(); }

 private:
  static QuarantineInfo InfoOf(uint64_t region_id, const Entry& e);
  std::map<uint64_t, Entry> by_region_;
};

}  // namespace gpucache
