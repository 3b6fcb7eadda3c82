#include "tests/bench/replay.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace gpucache::replay {

std::vector<Request> LoadTrace(const std::string& path, size_t limit) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<Request> out;
  std::string line;
  size_t n = 0;
  while (std::getline(in, line) && (limit == 0 || out.size() < limit)) {
    ++n;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("hash_ids") || !j["hash_ids"].is_array() ||
        !j.contains("input_length")) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": not a trace record");
    }
    Request r;
    r.timestamp_ms = j.value("timestamp", uint64_t{0});
    r.input_length = j["input_length"].get<uint32_t>();
    r.blocks = j["hash_ids"].get<std::vector<uint64_t>>();
    out.push_back(std::move(r));
  }
  return out;
}

uint64_t UniqueBlocks(const std::vector<Request>& trace) {
  std::unordered_set<uint64_t> u;
  for (const Request& r : trace) u.insert(r.blocks.begin(), r.blocks.end());
  return u.size();
}

uint32_t TokensInBlock(const Request& r, size_t i) {
  uint64_t start = uint64_t{kTokensPerBlock} * i;
  if (r.input_length <= start) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(kTokensPerBlock, r.input_length - start));
}

namespace {

// Tokens of the leading run of `r` for which `present` holds.
template <typename Present>
uint64_t LeadingHitTokens(const Request& r, Present present) {
  uint64_t tokens = 0;
  for (size_t i = 0; i < r.blocks.size() && present(r.blocks[i]); ++i) tokens += TokensInBlock(r, i);
  return tokens;
}

// Trace block ids are small integers; policies expect well-spread 64-bit keys.
uint64_t Key(uint64_t id) {
  uint64_t z = id + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Score ReplayPolicy(const std::vector<Request>& trace, EvictionPolicy& policy, uint64_t capacity) {
  // Resident blocks get dense slots, reused once their block left, as the store's ids are.
  std::unordered_map<PolicyKey, Slot> resident;
  std::vector<PolicyKey> key_of;  // by slot
  std::vector<Slot> free_slots;
  bool sized = false;
  auto everything = [](Slot) { return true; };
  Score s;
  for (const Request& r : trace) {
    s.input_tokens += r.input_length;
    s.hit_tokens += LeadingHitTokens(r, [&](uint64_t b) { return resident.count(Key(b)) != 0; });
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      PolicyKey k = Key(r.blocks[i]);
      if (auto it = resident.find(k); it != resident.end()) {
        policy.OnAccess(it->second);
        continue;
      }
      policy.OnMiss(k);
      while (resident.size() >= capacity) {
        if (!sized) {  // as the store does: the policy learns the capacity when it first fills
          policy.SetCapacity(resident.size());
          sized = true;
        }
        auto v = policy.Victim(everything);
        if (!v) break;
        policy.OnRemove(*v);
        resident.erase(key_of[*v]);
        free_slots.push_back(*v);
      }
      if (resident.size() >= capacity) continue;
      std::optional<Slot> parent;
      if (i > 0) {
        if (auto p = resident.find(Key(r.blocks[i - 1])); p != resident.end()) parent = p->second;
      }
      Slot slot = static_cast<Slot>(key_of.size());
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        key_of.push_back(0);
      }
      key_of[slot] = k;
      policy.OnInsert(slot, parent, TokensInBlock(r, i) < kTokensPerBlock, k);
      resident.emplace(k, slot);
    }
  }
  return s;
}

Score ReplayBelady(const std::vector<Request>& trace, uint64_t capacity) {
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // next[t]: the time of the next access to the block accessed at time t.
  std::vector<uint64_t> access;
  for (const Request& r : trace) access.insert(access.end(), r.blocks.begin(), r.blocks.end());
  std::vector<uint64_t> next(access.size(), kNever);
  std::unordered_map<uint64_t, uint64_t> seen;
  for (uint64_t t = access.size(); t-- > 0;) {
    auto it = seen.find(access[t]);
    if (it != seen.end()) next[t] = it->second;
    seen[access[t]] = t;
  }
  std::unordered_map<uint64_t, uint64_t> resident;  // block -> its next use
  std::priority_queue<std::pair<uint64_t, uint64_t>> farthest;  // (next use, block), lazily stale
  Score s;
  uint64_t t = 0;
  for (const Request& r : trace) {
    s.input_tokens += r.input_length;
    s.hit_tokens += LeadingHitTokens(r, [&](uint64_t b) { return resident.count(b) != 0; });
    for (uint64_t b : r.blocks) {
      uint64_t nu = next[t++];
      if (auto it = resident.find(b); it != resident.end()) {
        it->second = nu;
        farthest.push({nu, b});
        continue;
      }
      if (resident.size() >= capacity) {
        while (!farthest.empty()) {
          auto [use, blk] = farthest.top();
          auto it = resident.find(blk);
          if (it != resident.end() && it->second == use) break;
          farthest.pop();  // stale entry
        }
        if (farthest.empty() || farthest.top().first <= nu) continue;  // keep what is resident
        resident.erase(farthest.top().second);
        farthest.pop();
      }
      resident[b] = nu;
      farthest.push({nu, b});
    }
  }
  return s;
}

}  // namespace gpucache::replay
