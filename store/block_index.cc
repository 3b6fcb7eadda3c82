#include "store/block_index.h"

#include <algorithm>
#include <cstring>

#include "store/posix_io.h"

namespace gpucache {

// A record costs every committed block this much: a field added is a decision
// (docs/performance.md, "Daemon memory").
static_assert(sizeof(BlockIndex::Record) == 80);

uint64_t BlockIndex::NameHash(uint32_t ns, const BlockDigest& name) {
  uint64_t a, b;
  std::memcpy(&a, name.data(), 8);
  std::memcpy(&b, name.data() + 8, 8);
  return NsHash(ns, a ^ (b * 0xC2B2AE3D27D4EB4Full));
}

// The name first: 16 bytes in the record itself, and all but certain to differ from another
// block's; the namespace is a look in the small table of contexts.
std::optional<BlockIndex::Id> BlockIndex::FindIn(uint32_t ns, const BlockDigest& name) const {
  return by_address_.Find(NameHash(ns, name), [&](Id id) {
    return records_[id].name == name && NamespaceOf(id) == ns;
  });
}

std::optional<BlockIndex::Id> BlockIndex::Find(const BlockAddress& address) const {
  std::optional<BlockDigest> name = ParseBlockName(address.block);
  if (!name) return std::nullopt;
  std::optional<uint32_t> ns = namespaces_.Find(address.tenant, address.ns);
  if (!ns) return std::nullopt;
  return FindIn(*ns, *name);
}

bool BlockIndex::HasLogical(uint64_t logical) const {
  return by_logical_.Find(logical, [&](Id id) { return records_[id].logical == logical; })
      .has_value();
}

std::optional<BlockIndex::Id> BlockIndex::ByTail(uint32_t ns, uint64_t tail) const {
  return by_tail_.Find(NsHash(ns, tail), [&](Id id) {
    return records_[id].tail == tail && NamespaceOf(id) == ns;
  });
}

BlockAddress BlockIndex::AddressOf(Id id) const {
  uint32_t ns = NamespaceOf(id);
  return BlockAddress{namespaces_.TenantOf(ns), namespaces_.NameOf(ns),
                      FormatBlockName(records_[id].name)};
}

void BlockIndex::Read(Id id, IndexedBlock& out) const {
  const Record& r = records_[id];
  const uint32_t ns = NamespaceOf(id);
  out.address.tenant.assign(namespaces_.TenantOf(ns));
  out.address.ns.assign(namespaces_.NameOf(ns));
  out.address.block = FormatBlockName(r.name);
  out.size = r.size;
  out.commit_epoch = r.epoch_apart ? odd_epochs_.at(id) : r.region_id >> 32;
  out.region_id = r.region_id;
  out.owner = contexts_[r.context].owner;
  out.commit_time_ns = r.commit_time_ns;
  out.keys = IndexKeys{};
  out.keys.logical = r.logical;
  out.keys.parent = r.parent;
  out.keys.tail = r.tail;
  out.keys.prefix = r.prefix;
  out.keys.valid_length = r.valid_length;
  out.keys.block_capacity = namespaces_.BlockCapacityOf(ns);
  out.keys.chain_length = r.chain_length;
  out.pinned = r.pinned;
}

void BlockIndex::MarkEvicting(Id id) {
  BlockState s = records_[id].state();
  if (Transition(s, BlockState::kEvicting)) records_[id].evicting = 1;
}

uint32_t BlockIndex::OpenReaders(Id id) const {
  if (open_readers_.empty()) return 0;
  auto it = open_readers_.find(id);
  return it == open_readers_.end() ? 0 : it->second;
}

void BlockIndex::ReaderClosed(Id id) {
  auto it = open_readers_.find(id);
  if (it != open_readers_.end() && --it->second == 0) open_readers_.erase(it);
}

uint32_t BlockIndex::Hold(uint32_t ns, Owner owner, std::shared_ptr<StoredPayload> state) {
  ContextKey key{state.get(), uint64_t{owner.uid} << 32 | owner.gid, ns};
  auto [it, added] = context_slots_.try_emplace(key, 0);
  if (added) {
    if (free_contexts_.empty()) {
      it->second = static_cast<uint32_t>(contexts_.size());
      contexts_.emplace_back();
    } else {
      it->second = free_contexts_.back();
      free_contexts_.pop_back();
    }
    contexts_[it->second] = Context{std::move(state), owner, ns, 0};
  }
  contexts_[it->second].uses++;
  return it->second;
}

void BlockIndex::Release(uint32_t slot) {
  Context& c = contexts_[slot];
  if (--c.uses != 0) return;
  context_slots_.erase(ContextKey{c.stored.get(), uint64_t{c.owner.uid} << 32 | c.owner.gid, c.ns});
  c = Context{};
  free_contexts_.push_back(slot);
}

std::optional<BlockIndex::Id> BlockIndex::Insert(const IndexedBlock& block, std::shared_ptr<StoredPayload> stored,
                                                 bool known_new) {
  const BlockAddress& address = block.address;
  const IndexKeys& keys = block.keys;
  const Owner owner = block.owner;
  std::optional<BlockDigest> name = ParseBlockName(address.block);
  if (!name) return std::nullopt;
  // No identity has more tokens than that (identity.h); the record keeps 21 bits of them.
  if (keys.valid_length > kMaxBlockTokens) return std::nullopt;
  // The name parsed and the namespace looked up once (a restart inserts every block).
  std::optional<uint32_t> known = namespaces_.Find(address.tenant, address.ns);
  if (known && !known_new && FindIn(*known, *name)) return std::nullopt;
  uint32_t ns = known ? *known : namespaces_.Add(address.tenant, address.ns, owner);
  Id id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    if (records_.size() >= IdTable::kMaxIds) return std::nullopt;  // the tables' id space is full
    id = static_cast<Id>(records_.size());
    records_.emplace_back();
  }
  Record& r = records_[id];
  r = Record{};
  r.name = *name;
  r.size = block.size;
  r.region_id = block.region_id;
  r.commit_time_ns = block.commit_time_ns;
  r.logical = keys.logical;
  r.parent = keys.parent;
  r.tail = keys.tail;
  r.prefix = keys.prefix;
  r.valid_length = keys.valid_length;
  r.chain_length = keys.chain_length;
  r.pinned = block.pinned;
  if (block.commit_epoch != block.region_id >> 32) {
    r.epoch_apart = 1;
    odd_epochs_[id] = block.commit_epoch;
  }
  r.context = Hold(ns, owner, std::move(stored));
  namespaces_.BlockAdded(ns, keys.block_capacity, block.commit_time_ns);
  count_++;
  by_address_.Insert(id, NameHash(ns, r.name), [this](Id i) { return AddressHashOf(i); });
  by_logical_.Insert(id, r.logical, [this](Id i) { return records_[i].logical; });
  by_parent_.Insert(id, NsHash(ns, r.parent),
                    [this](Id i) { return NsHash(NamespaceOf(i), records_[i].parent); });
  by_tail_.Insert(id, NsHash(ns, r.tail),
                  [this](Id i) { return NsHash(NamespaceOf(i), records_[i].tail); });
  return id;
}

BlockIndex::Record BlockIndex::Remove(Id id) {
  Record& r = records_[id];
  uint32_t ns = NamespaceOf(id);
  by_address_.Erase(id, NameHash(ns, r.name));
  by_logical_.Erase(id, r.logical);
  by_parent_.Erase(id, NsHash(ns, r.parent));
  by_tail_.Erase(id, NsHash(ns, r.tail));
  namespaces_.BlockRemoved(ns);
  if (r.epoch_apart) odd_epochs_.erase(id);
  open_readers_.erase(id);
  Release(r.context);
  Record out = r;
  out.context = kNoContext;
  r = Record{};
  free_ids_.push_back(id);
  count_--;
  return out;
}

void BlockIndex::Reserve(size_t blocks) {
  size_t n = count_ + blocks;
  records_.reserve(n);
  AdviseHugePages(records_);
  by_address_.Reserve(n, [this](Id i) { return AddressHashOf(i); });
  by_logical_.Reserve(n, [this](Id i) { return records_[i].logical; });
  by_parent_.Reserve(n, [this](Id i) { return NsHash(NamespaceOf(i), records_[i].parent); });
  by_tail_.Reserve(n, [this](Id i) { return NsHash(NamespaceOf(i), records_[i].tail); });
}

size_t BlockIndex::MemoryBytes() const {
  size_t bytes = records_.capacity() * sizeof(Record) + free_ids_.capacity() * sizeof(Id) +
                 contexts_.capacity() * sizeof(Context) + free_contexts_.capacity() * sizeof(uint32_t) +
                 (context_slots_.size() + odd_epochs_.size() + open_readers_.size()) * 32;  // a node each, about
  for (const IdTable* t : {&by_address_, &by_logical_, &by_parent_, &by_tail_}) {
    bytes += t->MemoryBytes();
  }
  return bytes;
}

}  // namespace gpucache
