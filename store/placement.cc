#include "store/placement.h"

#include "store/fast_hash.h"

#include <cmath>

namespace gpucache {
namespace {

// The key's hash for one candidate, as a uniform value in the open interval (0, 1).
double UnitHash(std::string_view key, uint64_t seed) {
  uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), seed);
  return (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;  // 53 bits, never 0 or 1
}

}  // namespace

std::optional<size_t> PickPlacement(std::string_view key, std::span<const PlacementCandidate> candidates) {
  bool any_weight = false;
  for (const PlacementCandidate& c : candidates) any_weight |= c.in_service && c.weight > 0;
  std::optional<size_t> best;
  double best_score = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const PlacementCandidate& c = candidates[i];
    if (!c.in_service || (any_weight && c.weight <= 0)) continue;
    double u = UnitHash(key, c.seed);
    // -w / ln(u): ln(u) < 0, so the score is positive; with equal weights the order is that
    // of u, i.e. plain rendezvous hashing.
    double score = (any_weight ? c.weight : 1.0) / -std::log(u);
    if (!best || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

}  // namespace gpucache
