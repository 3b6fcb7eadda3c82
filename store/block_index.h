// BlockIndex: the committed blocks a store knows, and the tables that find them.
//
// Records live in one array, named by a dense 32-bit id that stays the same while the block is
// indexed (ids of removed blocks are reused). Each namespace (tenant, namespace directory) is
// interned once in a NamespaceTable (store/namespace_table.h). Four IdTables (store/id_table.h)
// find records by
//   - address (namespace id + block name): every probe, open and commit;
//   - logical key (GPCL digest): "incompatible" misses;
//   - (namespace, chain[0] digest): prefix-hit candidates and, by chain.back(), parent links;
// each at about 6 bytes a block. The identity itself is not kept (store/index_keys.h).
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h).
#pragma once

#include <algorithm>
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
#include "store/lifecycle.h"
#include "store/medium.h"
#include "store/namespace_table.h"

namespace gpucache {

class BlockIndex {
 public:
  using Id = uint32_t;
  static constexpr uint32_t kNoContext = ~uint32_t{0};

  // One committed block: 80 bytes. Its address is its namespace and `name`. What the index
  // does not keep, because a lookup answered from memory never needs it: the payload checksum
  // and the identity (Stat and Open read both from the medium, the block file's header, and
  // check that the identity names the address, which is a digest of all of it); the identity
  // digest (the address stands for it); the block capacity (one of the fields a namespace's
  // name digests: kept once per namespace). Kept elsewhere, because few blocks differ from the
  // rule (docs/performance.md, "Daemon memory"):
  //   - the namespace, medium state and owner: one `context` slot of a table of the distinct
  //     triples (a data directory, a namespace and a committer are shared by many blocks);
  //   - the commit epoch: the region id's high 32 bits (a reservation's region carries the
  //     epoch it was made in, and a fence ends every reservation of the epoch it ends), else
  //     `epoch_apart` and a side table;
  //   - open readers: a side table of the blocks open right now.
  struct Record {
    BlockDigest name{};
    uint64_t size = 0;
    uint64_t region_id = 0;
    uint64_t commit_time_ns = 0;
    // IndexKeys (store/index_keys.h) but the identity digest and block capacity (Read).
    uint64_t logical = 0;
    uint64_t parent = 0;
    uint64_t tail = 0;
    uint64_t prefix = 0;
    uint32_t context = kNoContext;  // a slot of contexts_ (set by Insert); kNoContext: free
    uint32_t valid_length : 21 = 0;  // <= kMaxBlockTokens (2^20)
    uint32_t chain_length : 8 = 0;   // <= kMaxChainLength (128)
    uint32_t pinned : 1 = 0;
    uint32_t evicting : 1 = 0;       // leaving: COMMITTED -> EVICTING (MarkEvicting)
    uint32_t epoch_apart : 1 = 0;    // its commit epoch is in odd_epochs_
    BlockState state() const { return evicting ? BlockState::kEvicting : BlockState::kCommitted; }
  };
  // The namespaces the blocks are in (the store adds, removes and touches them here).
  const NamespaceTable& namespaces() const { return namespaces_; }
  NamespaceTable& namespaces() { return namespaces_; }

  // --- Blocks.
  std::optional<Id> Find(const BlockAddress& address) const;
  // Adds `block` with `stored`, the medium's state of it; nullopt (and nothing changes) if its
  // address is already indexed, its keys are out of range (valid_length above kMaxBlockTokens)
  // or the index holds IdTable::kMaxIds blocks. Its namespace is added if missing, owned by
  // its owner. `known_new`: the caller knows the address is not indexed (a start's blocks from
  // INDEX: the look for it was a cache miss a block). REQUIRES: keys.block_capacity is the
  // namespace's (a field its name digests), if it holds blocks already.
  std::optional<Id> Insert(const IndexedBlock& block, std::shared_ptr<StoredPayload> stored = nullptr,
                           bool known_new = false);
  // The block at `id` as Insert took it but for keys.identity (0: not kept): the one place a
  // record becomes a block's metadata again. `out`'s strings keep their buffers (a listing of
  // every block reuses one).
  void Read(Id id, IndexedBlock& out) const;
  IndexedBlock Read(Id id) const {
    IndexedBlock b;
    Read(id, b);
    return b;
  }
  // Takes a block out (and its hold on its context); its id may be reused from now on.
  Record Remove(Id id);
  const std::shared_ptr<StoredPayload>& StoredOf(Id id) const {
    return contexts_[records_[id].context].stored;
  }
  Record& at(Id id) { return records_[id]; }
  const Record& at(Id id) const { return records_[id]; }
  uint32_t NamespaceOf(Id id) const { return contexts_[records_[id].context].ns; }
  // The block leaves the namespace: COMMITTED -> EVICTING (lifecycle.h), before Remove.
  void MarkEvicting(Id id);
  // Readers holding the block open; a block with any is quarantined, not dropped, on removal.
  uint32_t OpenReaders(Id id) const;
  void ReaderOpened(Id id) { open_readers_[id]++; }
  void ReaderClosed(Id id);
  Owner BlockOwner(Id id) const { return contexts_[records_[id].context].owner; }
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
      if (records_[id].parent == parent && NamespaceOf(id) == ns) visit(id);
    });
  }
  // Every block, in id order.
  template <class Visit>
  void ForEach(const Visit& visit) const {
    ForEachFrom(0, static_cast<Id>(records_.size()), visit);
  }
  // The blocks among the ids [from, from + count), in id order; returns the id to go on from,
  // or nullopt once the pass is over. A block keeps its id while it is indexed, so a pass made
  // of slices, the index changing between them, still visits every block that stayed put
  // exactly once.
  template <class Visit>
  std::optional<Id> ForEachFrom(Id from, Id count, const Visit& visit) const {
    if (from >= records_.size()) return std::nullopt;
    Id end = static_cast<Id>(std::min<size_t>(records_.size(), size_t{from} + count));
    for (Id id = from; id < end; ++id) {
      if (records_[id].context != kNoContext) visit(id);
    }
    return end;
  }
  size_t size() const { return count_; }
  // Room for `blocks` more without growing.
  void Reserve(size_t blocks);
  // Heap bytes held, for the index benchmark.
  size_t MemoryBytes() const;

 private:
  static uint64_t NsHash(uint32_t ns, uint64_t digest) {
    return digest ^ (uint64_t{ns} * 0x9E3779B97F4A7C15ull);
  }
  static uint64_t NameHash(uint32_t ns, const BlockDigest& name);
  uint64_t AddressHashOf(Id id) const { return NameHash(NamespaceOf(id), records_[id].name); }
  std::optional<Id> FindIn(uint32_t ns, const BlockDigest& name) const;

  // What many blocks share: their namespace, the medium's state of them (FileMedium has one
  // per data directory; MemoryMedium one per block, beside its payload) and their owner, each
  // distinct triple held once with a count of its records.
  struct Context {
    std::shared_ptr<StoredPayload> stored;
    Owner owner;
    uint32_t ns = 0;
    uint32_t uses = 0;
  };
  struct ContextKey {
    const StoredPayload* stored;
    uint64_t owner;
    uint32_t ns;
    bool operator==(const ContextKey&) const = default;
  };
  struct ContextKeyHash {
    size_t operator()(const ContextKey& k) const {
      return std::hash<const void*>()(k.stored) ^ (k.owner * 0x9E3779B97F4A7C15ull) ^
             (uint64_t{k.ns} * 0xC2B2AE3D27D4EB4Full);
    }
  };
  uint32_t Hold(uint32_t ns, Owner owner, std::shared_ptr<StoredPayload> stored);
  void Release(uint32_t context);

  NamespaceTable namespaces_;
  std::vector<Record> records_;
  std::vector<Id> free_ids_;
  std::vector<Context> contexts_;
  std::vector<uint32_t> free_contexts_;
  std::unordered_map<ContextKey, uint32_t, ContextKeyHash> context_slots_;
  // The rare blocks whose commit epoch is not their region id's high half (none that this
  // version commits; a file of another writer could be one).
  std::unordered_map<Id, uint64_t> odd_epochs_;
  // Readers per open block (few at a time).
  std::unordered_map<Id, uint32_t> open_readers_;
  size_t count_ = 0;
  IdTable by_address_{/*keys_unique=*/true}, by_logical_, by_parent_, by_tail_;
};

}  // namespace gpucache
