// StoreReads: the store's reading role (BlockReads, store/block_store.h): namespaces and
// committed blocks, every byte verified on the way out (store/verifying_reader.h), and the
// hit / prefix-hit / miss answer of Lookup. A layer of IndexedStore over StoreCore
// (store/store_core.h).
#pragma once

#include "store/store_fills.h"

namespace gpucache {

class StoreReads : public StoreFills, public virtual BlockReads {
 public:
  Result<NamespaceInfo> StatNamespace(std::string_view tenant, std::string_view ns) override;
  std::vector<std::string> ListNamespaces(std::string_view tenant) override;
  std::vector<std::string> ListEntries(std::string_view tenant, std::string_view ns) override;
  void VisitBlocks(std::string_view tenant,
                   const std::function<bool(const BlockAddress&)>& visit) override;

  // kNotFound also if the stored identity no longer matches (then it is dropped as corrupt).
  Result<BlockInfo> Stat(const BlockAddress& address) override;
  Result<BlockInfo> StatAttributes(const BlockAddress& address) override;
  Result<BlockInfo> Probe(const BlockAddress& address) override;
  Result<std::shared_ptr<BlockReader>> Open(const BlockAddress& address) override;
  Result<std::shared_ptr<BlockReader>> OpenForCopy(const BlockAddress& address) override;
  LookupResult Lookup(const CacheIdentity& identity) override;

 protected:
  using StoreFills::StoreFills;

 private:
  // Open (`client`: a use, and an open reader that eviction respects), OpenForCopy (neither).
  Result<std::shared_ptr<BlockReader>> OpenReader(const BlockAddress& address, bool client);
  // Open and Stat met an I/O error opening the block's file or reading its header.
  void ReportOpenError(const BlockAddress& address, const StoredPayload* stored) EXCLUDES(mu_);
  std::optional<LookupResult> PrefixHitLocked(const CacheIdentity& want, const BlockAddress& self)
      REQUIRES(mu_);
};

}  // namespace gpucache
