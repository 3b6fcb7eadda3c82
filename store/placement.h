// Placement of blocks over data directories: weighted rendezvous (highest random weight)
// hashing.
//
// Every candidate directory scores a key as -weight / ln(u), where u in (0, 1) is the key's
// hash seeded with the candidate's seed; the highest score wins. Over many keys each candidate
// receives a share proportional to its weight (FileMedium weighs directories by their free
// bytes, so a fuller device takes fewer new blocks), and taking a candidate away moves only
// the keys it held. Candidates of weight 0 (a full device) are chosen only when every
// candidate weighs 0, and then by plain rendezvous hashing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace gpucache {

struct PlacementCandidate {
  uint64_t seed = 0;  // stable per directory (its index among the configured ones)
  double weight = 1;  // >= 0
  bool in_service = true;
};

// Index of the winning candidate; nullopt when none is in service.
std::optional<size_t> PickPlacement(std::string_view key, std::span<const PlacementCandidate> candidates);

}  // namespace gpucache
