// LeavingSet: the addresses whose departed block's file is not yet removed or moved. A
// departure takes the block out of the index under the store's lock and works on its file
// after it (IndexedStore::Finish); until then a Reserve of the address waits, or a commit
// landing in that gap would lose its new file to the old block's departure. The background
// walk claims an address the same way while it reads a file no entry named.
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h), and WaitWhileLeaving releases it while it waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "store/block_store.h"
#include "store/medium.h"

namespace gpucache {

// Work to finish outside the store's lock after a block left the namespace (state EVICTING).
struct Departure {
  BlockInfo info;  // without identity
  std::shared_ptr<StoredPayload> stored;
  bool quarantine = false;  // keep the bytes (open handles), else drop them
  // Non-empty: the bytes are damaged (what failed, e.g. "chunk 3 (bytes ...)"); the file is
  // set aside for examination instead of dropped.
  std::string damage;
  // What the removal observer is told of a block whose file was found gone (ReportVanished).
  std::string note;
};

class LeavingSet {
 public:
  // A departure of the block at `address` begins (several may be under way).
  void Leaving(const BlockAddress& address) { count_[address.RelativePath()]++; }
  // One of them is done; the last one wakes who waits for the address.
  void Left(const BlockAddress& address) {
    auto it = count_.find(address.RelativePath());
    if (it == count_.end()) return;
    if (--it->second == 0) count_.erase(it);
    left_.notify_all();
  }
  bool Contains(const BlockAddress& address) const {
    return !count_.empty() && count_.contains(address.RelativePath());
  }
  // Returns once no departure of `address` is under way; `lock` (held) is let go meanwhile.
  template <class Lock>
  void WaitWhileLeaving(const BlockAddress& address, Lock& lock) {
    while (Contains(address)) left_.wait(lock);
  }

 private:
  std::unordered_map<std::string, uint32_t> count_;  // departures under way, by relative path
  std::condition_variable_any left_;
};

}  // namespace gpucache
