// IdTable: an open-addressing hash table of 32-bit record ids, for the store's index.
//
// It stores ids only; what an id stands for (its key) lives in the caller's record array, so a
// table costs 4 bytes a slot instead of a node per entry. The caller passes the key's 64-bit
// hash with every call and a predicate that compares a candidate's key; a table may hold
// several ids under equal keys (a multiset): up to 8 ids of one 64-bit hash sit in the slots,
// and the others of that hash (equal keys: a parent's many children, blocks sharing a digest)
// are kept apart, so that they never form a cluster that every probe landing in it would walk
// (100,000 blocks under one key made a start take 6.5 s: docs/performance.md). Linear probing, tombstones on erase, rebuilt at
// 80% of slots used (live or tombstones) to 65% live. Any number of slots (a hash maps to one
// by multiplying, not by masking), so the table is sized to its records rather than to the
// next power of two: 4 / 0.8 to 4 / 0.65 bytes a record as it grows (5.0 to 6.2), 5.3 after
// Reserve (75%, where a probe for an absent key passes about 8 slots, each a look at a
// record: docs/performance.md, "Daemon memory").
//
// A slot holds the id in its low 27 bits and 5 bits of the key's hash above them: a probe passes
// a slot of another hash without looking at its record (a cache miss each once the records
// outgrow the caches: with 8 records read per absent key, 1,000,000 blocks took 3 s to index at
// a start, 13 times 100,000: docs/performance.md, "The loader at a million blocks"). Ids are
// below kMaxIds (134 million blocks; BlockIndex refuses more).
//
// Thread safety: none; the store's lock serializes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gpucache {

class IdTable {
 public:
  using Id = uint32_t;
  static constexpr int kIdBits = 27;
  // Ids are below this (the two highest values of a slot mark empty and removed slots).
  static constexpr Id kMaxIds = (Id{1} << kIdBits) - 2;

  // Adds `id` under `hash`. `hash_of(id)` must give any stored id's hash (for rebuilding).
  // `keys_unique`: the caller never inserts two ids under equal keys (the address table), so
  // Insert need not look for an id of the same hash.
  explicit IdTable(bool keys_unique = false) : keys_unique_(keys_unique) {}

  template <class HashOf>
  void Insert(Id id, uint64_t hash, const HashOf& hash_of) {
    if ((used_ + 1) * 10 > slots_.size() * 8) Rebuild(live_ * 20 / 13 + 16, hash_of);  // to 65%
    size_t i = Home(hash);
    const Slot tag = TagOf(hash);
    size_t free = slots_.size();  // the first tombstone on the way, else the empty slot
    size_t same = 0;              // ids of this hash on the way
    for (; slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] == kGone) {
        if (free == slots_.size()) free = i;
      } else if (!keys_unique_ && TagIn(slots_[i]) == tag && hash_of(IdIn(slots_[i])) == hash &&
                 ++same == kEqualInSlots) {
        equal_[hash].insert(id);  // as many of this hash as may be are in the slots already
        equal_count_++;
        return;
      }
    }
    if (free == slots_.size()) {
      free = i;
      used_++;
    }
    slots_[free] = tag | id;
    live_++;
  }
  // Removes `id`, stored under `hash`; false if it is not there.
  bool Erase(Id id, uint64_t hash) {
    if (slots_.empty()) return false;
    auto equal = equal_.find(hash);
    const Slot tagged = TagOf(hash) | id;
    for (size_t i = Home(hash); slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] != tagged) continue;
      if (equal != equal_.end()) {  // one kept apart (of the same hash) takes its slot
        Id moved = *equal->second.begin();
        slots_[i] = TagOf(hash) | moved;
        TakeEqual(equal, moved);
      } else {
        slots_[i] = kGone;
        live_--;
      }
      return true;
    }
    if (equal == equal_.end() || !equal->second.contains(id)) return false;
    TakeEqual(equal, id);
    return true;
  }
  // The first id under `hash` that `match` accepts.
  template <class Match>
  std::optional<Id> Find(uint64_t hash, const Match& match) const {
    if (slots_.empty()) return std::nullopt;
    const Slot tag = TagOf(hash);
    for (size_t i = Home(hash); slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] != kGone && TagIn(slots_[i]) == tag && match(IdIn(slots_[i]))) return IdIn(slots_[i]);
    }
    if (auto equal = equal_.find(hash); equal != equal_.end()) {
      for (Id id : equal->second) {
        if (match(id)) return id;
      }
    }
    return std::nullopt;
  }
  // Calls `visit` for every id that may be under `hash` (the caller compares keys).
  template <class Visit>
  void ForEachCandidate(uint64_t hash, const Visit& visit) const {
    if (slots_.empty()) return;
    const Slot tag = TagOf(hash);
    for (size_t i = Home(hash); slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] != kGone && TagIn(slots_[i]) == tag) visit(IdIn(slots_[i]));
    }
    if (auto equal = equal_.find(hash); equal != equal_.end()) {
      for (Id id : equal->second) visit(id);
    }
  }
  // Room for `ids` without rebuilding.
  template <class HashOf>
  void Reserve(size_t ids, const HashOf& hash_of) {
    if (ids * 4 > slots_.size() * 3) Rebuild(ids * 4 / 3 + 16, hash_of);  // to 75%
  }
  size_t size() const { return live_ + equal_count_; }
  // The slots, and about what the ids kept apart cost (a hash node each, a set per hash).
  size_t MemoryBytes() const {
    return slots_.capacity() * sizeof(Slot) + equal_count_ * 32 + equal_.size() * 96;
  }
  // The longest run of occupied slots (ids and tombstones): what a probe can have to walk.
  size_t LongestRun() const {
    size_t longest = 0, run = 0;
    for (Slot s : slots_) {
      run = s == kEmpty ? 0 : run + 1;
      longest = std::max(longest, run);
    }
    return longest;
  }

 private:
  using Slot = uint32_t;  // 5 bits of the hash, then the id
  static constexpr Slot kIdMask = (Slot{1} << kIdBits) - 1;
  static constexpr Slot kEmpty = ~Slot{0};
  static constexpr Slot kGone = ~Slot{0} - 1;

  // The hashes are digests already; mix once more so that equal bits spread.
  static uint64_t Mix(uint64_t hash) {
    hash ^= hash >> 33;
    hash *= 0xff51afd7ed558ccdull;
    hash ^= hash >> 33;
    return hash;
  }
  // The slot is chosen by the mixed hash's high bits (the high half of a 128-bit product:
  // Lemire's fast range reduction), the tag taken from its low ones.
  size_t Home(uint64_t hash) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(Mix(hash)) * slots_.size()) >> 64);
  }
  static Slot TagOf(uint64_t hash) { return static_cast<Slot>(Mix(hash)) & ~kIdMask; }
  static Slot TagIn(Slot s) { return s & ~kIdMask; }
  static Id IdIn(Slot s) { return s & kIdMask; }
  size_t Next(size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  template <class HashOf>
  void Rebuild(size_t n, const HashOf& hash_of) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(n, kEmpty);
    used_ = live_ = 0;
    for (Slot s : old) {
      if (s == kEmpty || s == kGone) continue;
      size_t i = Home(hash_of(IdIn(s)));
      while (slots_[i] != kEmpty) i = Next(i);
      slots_[i] = s;
      used_++;
      live_++;
    }
  }

  // Ids of one hash kept in the slots before the rest go apart: a few equal keys (the shards of
  // one logical block) cost a few probes and no node; thousands would cost every probe.
  static constexpr size_t kEqualInSlots = 8;
  using Equal = std::unordered_map<uint64_t, std::unordered_set<Id>>;
  void TakeEqual(Equal::iterator equal, Id id) {
    equal->second.erase(id);
    if (equal->second.empty()) equal_.erase(equal);
    equal_count_--;
  }

  bool keys_unique_ = false;
  std::vector<Slot> slots_;  // at least 16, or empty
  // By hash, the ids of a hash that already has kEqualInSlots ids in the slots.
  Equal equal_;
  size_t equal_count_ = 0;
  size_t used_ = 0;        // slots holding an id or a tombstone
  size_t live_ = 0;        // slots holding an id
};

}  // namespace gpucache
