#include "store/block_index.h"

#include <algorithm>
#include <cstring>

#include "store/posix_io.h"

namespace gpucache {

// A record costs every committed block this much: a field added is a decision
// (docs/performance.md, "Daemon memory").
static_assert(sizeof(BlockIndex::Record) == 104);

uint64_t BlockIndex::NameHash(uint32_t ns, const BlockDigest& name) {
  uint64_t a, b;
  std::memcpy(&a, name.data(), 8);
  std::memcpy(&b, name.data() + 8, 8);
  return NsHash(ns, a ^ (b * 0xC2B2AE3D27D4EB4Full));
}

std::optional<uint32_t> BlockIndex::FindNamespace(std::string_view tenant, std::string_view ns) const {
  auto it = namespace_ids_.find(std::pair<std::string_view, std::string_view>(tenant, ns));
  if (it == namespace_ids_.end()) return std::nullopt;
  return it->second;
}

uint32_t BlockIndex::AddNamespace(const std::string& tenant, const std::string& ns, Owner owner) {
  if (std::optional<uint32_t> id = FindNamespace(tenant, ns)) return *id;
  uint32_t id;
  if (!free_namespaces_.empty()) {
    id = free_namespaces_.back();
    free_namespaces_.pop_back();
  } else {
    id = static_cast<uint32_t>(namespaces_.size());
    namespaces_.emplace_back();
  }
  namespaces_[id] = Namespace{tenant, ns, owner, 0, {}, true};
  namespace_ids_.emplace(std::pair(tenant, ns), id);
  return id;
}

void BlockIndex::RemoveNamespace(uint32_t ns) {
  Namespace& n = namespaces_[ns];
  auto it = namespace_ids_.find(std::pair<std::string_view, std::string_view>(n.tenant, n.name));
  if (it != namespace_ids_.end()) namespace_ids_.erase(it);
  n = Namespace{};
  free_namespaces_.push_back(ns);
}

std::vector<std::string> BlockIndex::NamespacesOf(std::string_view tenant) const {
  std::vector<std::string> out;
  for (auto it = namespace_ids_.lower_bound(std::pair<std::string_view, std::string_view>(tenant, ""));
       it != namespace_ids_.end() && it->first.first == tenant; ++it) {
    out.push_back(it->first.second);
  }
  return out;
}

std::optional<BlockIndex::Id> BlockIndex::Find(const BlockAddress& address) const {
  std::optional<BlockDigest> name = ParseBlockName(address.block);
  if (!name) return std::nullopt;
  std::optional<uint32_t> ns = FindNamespace(address.tenant, address.ns);
  if (!ns) return std::nullopt;
  return by_address_.Find(NameHash(*ns, *name), [&](Id id) {
    return records_[id].ns == *ns && records_[id].name == *name;
  });
}

bool BlockIndex::HasLogical(uint64_t logical) const {
  return by_logical_.Find(logical, [&](Id id) { return records_[id].logical == logical; })
      .has_value();
}

std::optional<BlockIndex::Id> BlockIndex::ByTail(uint32_t ns, uint64_t tail) const {
  return by_tail_.Find(NsHash(ns, tail), [&](Id id) {
    return records_[id].ns == ns && records_[id].tail == tail;
  });
}

BlockAddress BlockIndex::AddressOf(Id id) const {
  const Record& r = records_[id];
  return BlockAddress{namespaces_[r.ns].tenant, namespaces_[r.ns].name, FormatBlockName(r.name)};
}

uint32_t BlockIndex::Hold(std::shared_ptr<StoredPayload> state) {
  if (!state) return 0;
  auto [it, added] = stored_slots_.try_emplace(state.get(), 0);
  if (added) {
    if (free_stored_.empty()) {
      it->second = static_cast<uint32_t>(stored_.size());
      stored_.emplace_back();
    } else {
      it->second = free_stored_.back();
      free_stored_.pop_back();
    }
    stored_[it->second].state = std::move(state);
  }
  stored_[it->second].uses++;
  return it->second;
}

void BlockIndex::Release(uint32_t slot) {
  if (slot == 0 || --stored_[slot].uses != 0) return;
  stored_slots_.erase(stored_[slot].state.get());
  stored_[slot].state.reset();
  free_stored_.push_back(slot);
}

IndexKeys BlockIndex::KeysOf(Id id) const {
  const Record& r = records_[id];
  IndexKeys k;
  k.logical = r.logical;
  k.parent = r.parent;
  k.tail = r.tail;
  k.prefix = r.prefix;
  k.valid_length = r.valid_length;
  k.block_capacity = namespaces_[r.ns].block_capacity;
  k.chain_length = r.chain_length;
  return k;
}

uint32_t BlockIndex::InternOwner(Owner owner) {
  auto [it, added] = owner_slots_.try_emplace(uint64_t{owner.uid} << 32 | owner.gid,
                                              static_cast<uint32_t>(owners_.size()));
  if (added) owners_.push_back(owner);
  return it->second;
}

std::optional<BlockIndex::Id> BlockIndex::Insert(const BlockAddress& address, Record record,
                                                 const IndexKeys& keys, Owner owner,
                                                 std::shared_ptr<StoredPayload> stored) {
  std::optional<BlockDigest> name = ParseBlockName(address.block);
  if (!name) return std::nullopt;
  // The name parsed and the namespace looked up once (a restart inserts every block).
  std::optional<uint32_t> known = FindNamespace(address.tenant, address.ns);
  if (known && by_address_.Find(NameHash(*known, *name), [&](Id i) {
        return records_[i].ns == *known && records_[i].name == *name;
      })) {
    return std::nullopt;
  }
  uint32_t ns = known ? *known : AddNamespace(address.tenant, address.ns, owner);
  if (namespaces_[ns].blocks.empty()) namespaces_[ns].block_capacity = keys.block_capacity;
  record.logical = keys.logical;
  record.parent = keys.parent;
  record.tail = keys.tail;
  record.prefix = keys.prefix;
  record.valid_length = keys.valid_length;
  record.chain_length = keys.chain_length;
  record.owner = InternOwner(owner);
  Id id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<Id>(records_.size());
    records_.emplace_back();
  }
  record.name = *name;
  record.ns = ns;
  record.pos = static_cast<uint32_t>(namespaces_[ns].blocks.size());
  record.stored = Hold(std::move(stored));
  records_[id] = std::move(record);
  namespaces_[ns].blocks.push_back(id);
  count_++;
  const Record& r = records_[id];
  by_address_.Insert(id, NameHash(ns, r.name), [this](Id i) { return AddressHashOf(i); });
  by_logical_.Insert(id, r.logical, [this](Id i) { return records_[i].logical; });
  by_parent_.Insert(id, NsHash(ns, r.parent),
                    [this](Id i) { return NsHash(records_[i].ns, records_[i].parent); });
  by_tail_.Insert(id, NsHash(ns, r.tail),
                  [this](Id i) { return NsHash(records_[i].ns, records_[i].tail); });
  return id;
}

BlockIndex::Record BlockIndex::Remove(Id id) {
  Record& r = records_[id];
  by_address_.Erase(id, NameHash(r.ns, r.name));
  by_logical_.Erase(id, r.logical);
  by_parent_.Erase(id, NsHash(r.ns, r.parent));
  by_tail_.Erase(id, NsHash(r.ns, r.tail));
  std::vector<Id>& list = namespaces_[r.ns].blocks;
  Id moved = list.back();  // the last id takes the removed one's place
  list[r.pos] = moved;
  records_[moved].pos = r.pos;
  list.pop_back();
  Release(r.stored);
  Record out = std::move(r);
  out.stored = 0;
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
  by_parent_.Reserve(n, [this](Id i) { return NsHash(records_[i].ns, records_[i].parent); });
  by_tail_.Reserve(n, [this](Id i) { return NsHash(records_[i].ns, records_[i].tail); });
}

size_t BlockIndex::MemoryBytes() const {
  size_t bytes = records_.capacity() * sizeof(Record) + free_ids_.capacity() * sizeof(Id) +
                 stored_.capacity() * sizeof(Stored) + free_stored_.capacity() * sizeof(uint32_t) +
                 stored_slots_.size() * 32 +  // about a node each
                 owners_.capacity() * sizeof(Owner) + owner_slots_.size() * 32;
  for (const Namespace& n : namespaces_) bytes += n.blocks.capacity() * sizeof(Id);
  for (const IdTable* t : {&by_address_, &by_logical_, &by_parent_, &by_tail_}) {
    bytes += t->MemoryBytes();
  }
  return bytes;
}

}  // namespace gpucache
