// Eviction policies: which committed block leaves first when a retained-byte quota would fail.
//
// A policy only orders blocks; the store decides what is eligible (never a pinned, quarantined
// or open block; never another tenant's block for a tenant quota) and passes that as a
// predicate. A resident block is named by its slot: a small number, dense and reused once the
// block left (the store passes its BlockIndex id), so that a policy keeps its per-block state
// in flat arrays indexed by slot rather than in a node per block. Frequency is counted by
// PolicyKey, a 64-bit digest of the address (the store's PolicyKeyOf), which stays the same
// across a miss, the insert that follows and a later re-insert.
//
// Prefix awareness: a KV block is useful only while every ancestor in its chain is present,
// so prefix-aware policies are told each block's parent (the resident block whose chain the
// new one continues) and evict leaves (blocks with no resident children) before ancestors.
//
// Policies (MakePolicy names):
//   "prefix-lru"      default: partial blocks, then the least recently used leaf, first
//   "prefix-reuse"    the leaf least likely to be used again soon, learned online
//                     (store/eviction/prefix_reuse.h)
//   "prefix-tinylfu"  leaves only, W-TinyLFU (a recency window sized by Caffeine's hill
//                     climber, a count-min sketch of access frequency with aging, SLRU main)
//   "lru"             least recently used first
//   "oldest"          the seed's rule: the oldest committed block first (FIFO)
// The default was picked by measured hit ratio on the Mooncake conversation trace and generated
// chat and agent traces (docs/eviction.md has the numbers and the command; adr/0021).
//
// Thread safety: none; the owner (the store, under its mutex, or the replay tool) serializes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpucache {

using PolicyKey = uint64_t;
using Slot = uint32_t;  // < 2^32 - 2
using EligibleFn = std::function<bool(Slot)>;
using KeyOfFn = std::function<PolicyKey(Slot)>;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  // Capacity in blocks, a hint for policies that size internal regions (0: unknown).
  virtual void SetCapacity(uint64_t blocks) { (void)blocks; }
  // Slots below `slots` are about to be used (a restart): room for them without growing.
  virtual void Reserve(size_t slots) { (void)slots; }
  // How to get a resident block's key (as OnInsert was given it), for policies that follow
  // some blocks after they leave; valid until the block's OnRemove returns.
  virtual void SetKeyOf(KeyOfFn key_of) { (void)key_of; }
  // The block with address digest `key` became resident in `slot` (one no resident block
  // holds); `parent` is the resident block whose chain it continues, if any.
  // `partial`: the block holds fewer tokens than its capacity (the tail of a prompt). Only a
  // request with exactly those tokens can reuse it; the next turn of a conversation extends
  // the tail into a different, full block, which is why engines rarely share partial blocks.
  virtual void OnInsert(Slot slot, std::optional<Slot> parent, bool partial, PolicyKey key) = 0;
  // `child`, resident and without a parent, continues the chain of `parent`, which became
  // resident after it (a batch's blocks arrive in any order; a restart reloads in any order; a
  // parent is recomputed after it was evicted): it becomes `parent`'s child, as if it had come
  // second. Ignored if `child` has a parent already.
  virtual void OnChildFound(Slot parent, Slot child) {
    (void)parent;
    (void)child;
  }
  // A resident block was used.
  virtual void OnAccess(Slot slot) = 0;
  // A block was asked for and was not resident (frequency-aware policies count it).
  virtual void OnMiss(PolicyKey key) { (void)key; }
  // The block in `slot` left (evicted, invalidated, quarantined, corrupt); the slot may be
  // reused by the next OnInsert.
  virtual void OnRemove(Slot slot) = 0;
  // The block to evict next among those `eligible` accepts, or nullopt if none is.
  virtual std::optional<Slot> Victim(const EligibleFn& eligible) = 0;
  // Several victims for one request: each block Victim named is set aside, out of the order as
  // if it had left, so that the next Victim sees the parent it leaves childless as the leaf it
  // would be, and walks past none of the blocks already chosen (k victims cost O(k), not
  // O(k^2)). PutBack returns every block set aside since the last PutBack to where it was, as
  // if none had been chosen; the caller then removes those it evicts (OnRemove), or none if
  // the request was refused. Between the first SetAside and PutBack only Victim and SetAside
  // are called.
  virtual void SetAside(Slot slot) = 0;
  virtual void PutBack() = 0;
};

// Names accepted by MakePolicy, the default first.
const std::vector<std::string>& PolicyNames();
inline constexpr std::string_view kDefaultPolicy = "prefix-lru";
// nullptr for an unknown name.
std::unique_ptr<EvictionPolicy> MakePolicy(std::string_view name);

}  // namespace gpucache
