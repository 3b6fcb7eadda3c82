// NamespaceTable: the namespaces (tenant, namespace directory) a store knows, each interned once
// under a dense 32-bit id (ids of removed namespaces are reused), with its owner, the time it
// last changed and how many blocks it holds (it keeps no list of them). A part of BlockIndex
// (store/block_index.h), which counts blocks in and out as it indexes them; the store reads it
// and adds, removes and touches namespaces through BlockIndex::namespaces().
//
// Thread safety: none; the store's lock guards every call, as for BlockIndex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/block_store.h"

namespace gpucache {

class NamespaceTable {
 public:
  std::optional<uint32_t> Find(std::string_view tenant, std::string_view ns) const;
  // The id of (tenant, ns), added with `owner` if it was not there.
  uint32_t Add(const std::string& tenant, const std::string& ns, Owner owner);
  // REQUIRES: the namespace holds no block.
  void Remove(uint32_t ns);
  const std::string& TenantOf(uint32_t ns) const { return namespaces_[ns].tenant; }
  const std::string& NameOf(uint32_t ns) const { return namespaces_[ns].name; }
  Owner OwnerOf(uint32_t ns) const { return namespaces_[ns].owner; }
  size_t BlocksIn(uint32_t ns) const { return namespaces_[ns].blocks; }
  // Its blocks' capacity in tokens (a field every block name in it digests); set by its first
  // block.
  uint32_t BlockCapacityOf(uint32_t ns) const { return namespaces_[ns].block_capacity; }
  // When the namespace last changed (NamespaceInfo::change_time_ns): a block's commit moves it
  // to the commit time, Touch to a later time; it never goes back.
  uint64_t ChangedAt(uint32_t ns) const { return namespaces_[ns].changed_ns; }
  void Touch(uint32_t ns, uint64_t time_ns);
  // The namespace names of `tenant`, in name order.
  std::vector<std::string> NamesOf(std::string_view tenant) const;

 private:
  // Only the index counts blocks, so that BlocksIn is always what it holds.
  friend class BlockIndex;
  void BlockAdded(uint32_t ns, uint32_t block_capacity, uint64_t commit_time_ns);
  void BlockRemoved(uint32_t ns) { namespaces_[ns].blocks--; }

  struct Namespace {
    std::string tenant, name;
    Owner owner;
    uint32_t block_capacity = 0;  // its blocks'; set by the first one
    size_t blocks = 0;            // how many it holds
    uint64_t changed_ns = 0;      // ChangedAt
  };
  // Orders (tenant, namespace) keys and finds them by string_views, without building a key.
  struct NamespaceLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      int t = std::string_view(a.first).compare(std::string_view(b.first));
      return t != 0 ? t < 0 : std::string_view(a.second) < std::string_view(b.second);
    }
  };

  std::vector<Namespace> namespaces_;
  std::vector<uint32_t> free_;
  std::map<std::pair<std::string, std::string>, uint32_t, NamespaceLess> ids_;
};

}  // namespace gpucache
