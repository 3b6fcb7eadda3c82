// IdTable: an open-addressing hash table of 32-bit record ids, for the store's index.
//
// It stores ids only; what an id stands for (its key) lives in the caller's record array, so a
// table costs 4 bytes a slot instead of a node per entry. The caller passes the key's 64-bit
// hash with every call and a predicate that compares a candidate's key; a table may hold
// several ids under equal keys (a multiset). Linear probing, tombstones on erase, rebuilt at
// 80% of slots used (live or tombstones) to 65% live. Any number of slots (a hash maps to one
// by multiplying, not by masking), so the table is sized to its records rather than to the
// next power of two: 4 / 0.8 to 4 / 0.65 bytes a record as it grows (5.0 to 6.2), 5.3 after
// Reserve (75%, where a probe for an absent key passes about 8 slots, each a look at a
// record: docs/performance.md, "Daemon memory").
//
// Thread safety: none; the store's lock serializes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace gpucache {

class IdTable {
 public:
  using Id = uint32_t;

  // Adds `id` under `hash`. `hash_of(id)` must give any stored id's hash (for rebuilding).
  template <class HashOf>
  void Insert(Id id, uint64_t hash, const HashOf& hash_of) {
    if ((used_ + 1) * 10 > slots_.size() * 8) Rebuild(live_ * 20 / 13 + 16, hash_of);  // to 65%
    size_t i = Home(hash);
    while (slots_[i] != kEmpty && slots_[i] != kGone) i = Next(i);
    if (slots_[i] == kEmpty) used_++;
    slots_[i] = id;
    live_++;
  }
  // Removes `id`, stored under `hash`; false if it is not there.
  bool Erase(Id id, uint64_t hash) {
    if (slots_.empty()) return false;
    for (size_t i = Home(hash); slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] == id) {
        slots_[i] = kGone;
        live_--;
        return true;
      }
    }
    return false;
  }
  // The first id under `hash` that `match` accepts.
  template <class Match>
  std::optional<Id> Find(uint64_t hash, const Match& match) const {
    if (slots_.empty()) return std::nullopt;
    for (size_t i = Home(hash); slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] != kGone && match(slots_[i])) return slots_[i];
    }
    return std::nullopt;
  }
  // Calls `visit` for every id that may be under `hash` (the caller compares keys).
  template <class Visit>
  void ForEachCandidate(uint64_t hash, const Visit& visit) const {
    if (slots_.empty()) return;
    for (size_t i = Home(hash); slots_[i] != kEmpty; i = Next(i)) {
      if (slots_[i] != kGone) visit(slots_[i]);
    }
  }
  // Room for `ids` without rebuilding.
  template <class HashOf>
  void Reserve(size_t ids, const HashOf& hash_of) {
    if (ids * 4 > slots_.size() * 3) Rebuild(ids * 4 / 3 + 16, hash_of);  // to 75%
  }
  size_t size() const { return live_; }
  size_t MemoryBytes() const { return slots_.capacity() * sizeof(Id); }

 private:
  static constexpr Id kEmpty = ~Id{0};
  static constexpr Id kGone = ~Id{0} - 1;

  size_t Home(uint64_t hash) const {
    // The hashes are digests already; mix once more so that equal bits spread, then map onto
    // the slots by the high half of a 128-bit product (Lemire's fast range reduction).
    hash ^= hash >> 33;
    hash *= 0xff51afd7ed558ccdull;
    hash ^= hash >> 33;
    return static_cast<size_t>((static_cast<unsigned __int128>(hash) * slots_.size()) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  template <class HashOf>
  void Rebuild(size_t n, const HashOf& hash_of) {
    std::vector<Id> old;
    old.swap(slots_);
    slots_.assign(n, kEmpty);
    used_ = live_ = 0;
    for (Id id : old) {
      if (id == kEmpty || id == kGone) continue;
      size_t i = Home(hash_of(id));
      while (slots_[i] != kEmpty) i = Next(i);
      slots_[i] = id;
      used_++;
      live_++;
    }
  }

  std::vector<Id> slots_;  // at least 16, or empty
  size_t used_ = 0;        // slots holding an id or a tombstone
  size_t live_ = 0;        // slots holding an id
};

}  // namespace gpucache
