// IndexedStore: the store contract (store/block_store.h), whole. Its roles are layers over one
// core (store/store_core.h says how they fit): StoreFills writes, StoreReads reads, StoreAdmin
// keeps; what is left here is the store's life: Load restores what the medium holds and starts
// the walk that checks the files of the blocks it restored unverified (adr/0016;
// store/store_core_verify.cc), and the destructor stops the walk and closes the medium. The
// identity of a committed block stays in the medium (store/index_keys.h; docs/architecture.md,
// "The index in memory").
//
// Thread safety: all public methods are safe to call concurrently (StoreCore's lock).
#pragma once

#include <memory>
#include <string>

#include "store/store_admin.h"

namespace gpucache {

class IndexedStore : public StoreAdmin, public BlockStore {
 public:
  // REQUIRES: MakePolicy(options.eviction_policy) is not null (callers validate the name).
  IndexedStore(StoreOptions options, std::unique_ptr<Medium> medium);
  // Closes the medium (a clean close: it may save what speeds up the next start).
  ~IndexedStore() override;
  // Restores what the medium holds; false (with a reason) if it cannot. Call once, first.
  bool Load(MediumReport& report, std::string& error);

  // Where the medium keeps a block's bytes (a block file), for tools and tests.
  std::string BackingPath(const BlockAddress& address) EXCLUDES(mu_);
  Medium& medium() { return *medium_; }
  const StoreOptions& options() const { return options_; }
  // Verification after start (adr/0016): WaitForVerification returns once the walk finished or
  // was stopped (from then on every indexed block has been checked against its file);
  // StartBackgroundWork starts it, at Load or, with StoreOptions::defer_background_work, after a
  // daemon's fork.
  using StoreCore::StartBackgroundWork;
  using StoreCore::WaitForVerification;

 private:
  // Indexes a part of what the medium found at start-up; how many blocks it indexed.
  size_t Restore(const Found& part) EXCLUDES(mu_);
  void CountDamagedAtLoad(const MediumReport& report) EXCLUDES(mu_);
};

}  // namespace gpucache
