// BlockIndex: the committed blocks a store knows, and the tables that find them.
//
// Records live in one array, named by a dense 32-bit id that stays the same while the block is
// indexed (ids of removed blocks are reused). Each namespace (tenant, namespace directory) is
// interned once and lists its blocks' ids. Four IdTables (store/id_table.h) find records by
//   - address (namespace id + block name): every probe, open and commit;
//   - logical key (GPCL digest): "incompatible" misses;
//   - (namespace, chain[0] digest): prefix-hit candidates and, by chain.back(), parent links;
// each at about 6 bytes a block. The identity itself is not kept (store/index_keys.h).
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "store/block_store.h"
#include "store/eviction/eviction_policy.h"
#include "store/id_table.h"
#include "store/index_keys.h"
#include "store/medium.h"

namespace gpucache {

class BlockIndex {
 public:
  using Id = uint32_t;

  // One committed block: 104 bytes, fields ordered so that none pads. Its address is its
  // namespace (`ns`) and `name`. What the index does not keep, because a lookup answered from
  // memory never needs it: the payload checksum and the identity (Stat and Open read both from
  // the medium, the block file's header, and check that the identity names the address, which
  // is a digest of all of it); the identity digest (the address stands for it); the block
  // capacity (one of the fields a namespace's name digests: kept once per namespace). The
  // owner is a slot of a table of the distinct owners.
  struct Record {
    BlockDigest name{};
    uint64_t size = 0;
    uint64_t region_id = 0;
    uint64_t commit_time_ns = 0;
    // IndexKeys (store/index_keys.h) but the identity digest and block capacity (KeysOf).
    uint64_t logical = 0;
    uint64_t parent = 0;
    uint64_t tail = 0;
    uint64_t prefix = 0;
    uint32_t valid_length = 0;
    uint32_t ns = 0;
    uint32_t pos = 0;          // where its id sits in its namespace's list
    int32_t open_readers = 0;
    // Epochs stay below 2^32: region ids carry them in their high 32 bits.
    uint32_t commit_epoch = 0;
    uint32_t stored = 0;       // its medium state: a slot of stored_ (set by Insert)
    uint32_t owner = 0;        // a slot of owners_ (set by Insert)
    uint8_t chain_length = 0;  // <= kMaxChainLength
    BlockState state = BlockState::kCommitted;
    bool pinned = false;
  };

  // --- Namespaces.
  std::optional<uint32_t> FindNamespace(std::string_view tenant, std::string_view ns) const;
  // The id of (tenant, ns), added with `owner` if it was not there.
  uint32_t AddNamespace(const std::string& tenant, const std::string& ns, Owner owner);
  // REQUIRES: the namespace holds no block.
  void RemoveNamespace(uint32_t ns);
  const std::string& TenantOf(uint32_t ns) const { return namespaces_[ns].tenant; }
  const std::string& NameOf(uint32_t ns) const { return namespaces_[ns].name; }
  Owner OwnerOf(uint32_t ns) const { return namespaces_[ns].owner; }
  size_t BlocksIn(uint32_t ns) const { return namespaces_[ns].blocks.size(); }
  const std::vector<Id>& BlockIds(uint32_t ns) const { return namespaces_[ns].blocks; }
  // The namespace names of `tenant`, in name order.
  std::vector<std::string> NamespacesOf(std::string_view tenant) const;

  // --- Blocks.
  std::optional<Id> Find(const BlockAddress& address) const;
  // Adds a block with `keys`, committed by `owner`, with `stored`, the medium's state of it;
  // nullopt (and nothing changes) if its address is already indexed. Of `record`, Insert
  // takes size, region, commit time and epoch, state and pin, and sets the rest. Its namespace
  // is added if missing, owned by `owner`.
  // REQUIRES: keys.block_capacity is the namespace's (a field its name digests), if it holds
  // blocks already.
  std::optional<Id> Insert(const BlockAddress& address, Record record, const IndexKeys& keys,
                           Owner owner, std::shared_ptr<StoredPayload> stored = nullptr);
  // Takes a block out (and its hold on its medium state); its id may be reused from now on.
  Record Remove(Id id);
  const std::shared_ptr<StoredPayload>& StoredOf(Id id) const {
    return stored_[records_[id].stored].state;
  }
  Record& at(Id id) { return records_[id]; }
  const Record& at(Id id) const { return records_[id]; }
  // The block's IndexKeys, as Insert took them but for `identity` (0: not kept).
  IndexKeys KeysOf(Id id) const;
  Owner BlockOwner(Id id) const { return owners_[records_[id].owner]; }
  BlockAddress AddressOf(Id id) const;
  // A block whose GPCL digest is `logical`, if any (an "incompatible" miss).
  bool HasLogical(uint64_t logical) const;
  // The block in `ns` whose last chain hash digests to `tail`: the parent of a block whose
  // chain[0] digests to it.
  std::optional<Id> ByTail(uint32_t ns, uint64_t tail) const;
  // Blocks in `ns` whose chain[0] digests to `parent`: the prefix-hit candidates.
  template <class Visit>
  void ForEachWithParent(uint32_t ns, uint64_t parent, const Visit& visit) const {
    by_parent_.ForEachCandidate(NsHash(ns, parent), [&](Id id) {
      const Record& r = records_[id];
      if (r.ns == ns && r.parent == parent) visit(id);
    });
  }
  // Every block, namespace by namespace.
  template <class Visit>
  void ForEach(const Visit& visit) const {
    for (uint32_t ns = 0; ns < namespaces_.size(); ++ns) {
      for (Id id : namespaces_[ns].blocks) visit(id);
    }
  }
  size_t size() const { return count_; }
  // Room for `blocks` more without growing.
  void Reserve(size_t blocks);
  // Heap bytes held, for the index benchmark.
  size_t MemoryBytes() const;

 private:
  struct Namespace {
    std::string tenant, name;
    Owner owner;
    uint32_t block_capacity = 0;  // its blocks'; set by the first one
    std::vector<Id> blocks;
    bool live = false;
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
  static uint64_t NsHash(uint32_t ns, uint64_t digest) {
    return digest ^ (uint64_t{ns} * 0x9E3779B97F4A7C15ull);
  }
  static uint64_t NameHash(uint32_t ns, const BlockDigest& name);
  uint64_t AddressHashOf(Id id) const { return NameHash(records_[id].ns, records_[id].name); }

  // Medium states, each held once however many records share it (FileMedium has one per data
  // directory; MemoryMedium one per block, beside its payload). Slot 0 is null.
  struct Stored {
    std::shared_ptr<StoredPayload> state;
    uint32_t uses = 0;
  };
  uint32_t Hold(std::shared_ptr<StoredPayload> state);
  uint32_t InternOwner(Owner owner);
  void Release(uint32_t slot);

  std::vector<Namespace> namespaces_;
  std::vector<uint32_t> free_namespaces_;
  std::map<std::pair<std::string, std::string>, uint32_t, NamespaceLess> namespace_ids_;
  std::vector<Record> records_;
  std::vector<Id> free_ids_;
  std::vector<Stored> stored_{1};
  std::vector<uint32_t> free_stored_;
  std::unordered_map<const StoredPayload*, uint32_t> stored_slots_;
  // The distinct owners of blocks, never dropped: a machine has few uid:gid pairs.
  std::vector<Owner> owners_;
  std::unordered_map<uint64_t, uint32_t> owner_slots_;
  size_t count_ = 0;
  IdTable by_address_, by_logical_, by_parent_, by_tail_;
};

}  // namespace gpucache
