#include "tests/bench/replay.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "store/admission.h"  // PolicyKeyOf
#include "store/layout.h"

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

Bytes Hash8(uint64_t id) {
  Bytes h(8);
  for (int i = 0; i < 8; ++i) h[i] = static_cast<uint8_t>(id >> (8 * i));
  return h;
}

}  // namespace

CacheIdentity ReplayIdentity(const Request& r, size_t i) {
  CacheIdentity id;
  id.tenant = "replay";
  id.trust_domain = "bench";
  id.model_revision = "bench/model@1";
  id.model_config_digest = "sha256:00";
  id.tokenizer_revision = "tok@1";
  id.kv_dtype = "bf16";
  id.quant_format = "none";
  id.layout_abi = "bench-v1";
  id.position_encoding = "rope";
  id.rope_scaling = "none";
  id.block_capacity = kTokensPerBlock;
  // A prompt's last block is partial; a trace id is partial in one request only, so this never
  // gives one id two identities.
  id.valid_length = std::max<uint32_t>(1, TokensInBlock(r, i));
  id.chain = {i == 0 ? Bytes(8, 0xff) : Hash8(r.blocks[i - 1]), Hash8(r.blocks[i])};
  return id;
}

PolicyKey ReplayKey(const Request& r, size_t i) { return PolicyKeyOf(AddressOf(ReplayIdentity(r, i))); }

std::vector<std::vector<PolicyKey>> ReplayKeys(const std::vector<Request>& trace) {
  std::unordered_map<uint64_t, PolicyKey> by_id;
  std::vector<std::vector<PolicyKey>> out;
  out.reserve(trace.size());
  for (const Request& r : trace) {
    std::vector<PolicyKey>& keys = out.emplace_back();
    keys.reserve(r.blocks.size());
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      auto [it, fresh] = by_id.try_emplace(r.blocks[i], 0);
      if (fresh) it->second = ReplayKey(r, i);
      keys.push_back(it->second);
    }
  }
  return out;
}

Score ReplayPolicy(const std::vector<Request>& trace, EvictionPolicy& policy, uint64_t capacity,
                   const std::vector<std::vector<PolicyKey>>* keys) {
  std::vector<std::vector<PolicyKey>> own;
  if (!keys) {
    own = ReplayKeys(trace);
    keys = &own;
  }
  // Resident blocks get dense slots, reused once their block left, as the store's ids are.
  std::unordered_map<PolicyKey, Slot> resident;
  std::vector<PolicyKey> key_of;  // by slot
  std::vector<Slot> free_slots;
  policy.SetKeyOf([&key_of](Slot s) { return key_of[s]; });
  bool sized = false;
  // As the store's commits (Admission::RoomForCommit): a block's resident ancestors never go
  // for it, and a block whose parent was refused room lately is refused when it needs room.
  std::vector<Slot> kept;
  auto not_kept = [&kept](Slot v) { return std::find(kept.begin(), kept.end(), v) == kept.end(); };
  std::unordered_set<PolicyKey> refused;
  std::deque<PolicyKey> refused_order;
  auto refuse = [&](PolicyKey k) {
    if (!refused.insert(k).second) return;
    refused_order.push_back(k);
    if (refused_order.size() > Admission::kRefusedTails) {
      refused.erase(refused_order.front());
      refused_order.pop_front();
    }
  };
  Score s;
  for (size_t ri = 0; ri < trace.size(); ++ri) {
    const Request& r = trace[ri];
    const std::vector<PolicyKey>& rk = (*keys)[ri];
    s.input_tokens += r.input_length;
    size_t lead = 0;
    while (lead < r.blocks.size() && resident.count(rk[lead])) s.hit_tokens += TokensInBlock(r, lead++);
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      PolicyKey k = rk[i];
      if (auto it = resident.find(k); it != resident.end()) {
        policy.OnAccess(it->second);
        continue;
      }
      policy.OnMiss(k);
      std::optional<Slot> parent;
      if (i > 0) {
        if (auto p = resident.find(rk[i - 1]); p != resident.end()) parent = p->second;
      }
      if (resident.size() >= capacity && !parent && i > 0 && refused.count(rk[i - 1])) {
        refuse(k);
        continue;
      }
      kept.clear();
      for (size_t a = i; a-- > 0;) {
        auto it = resident.find(rk[a]);
        if (it == resident.end()) break;
        kept.push_back(it->second);
      }
      while (resident.size() >= capacity) {
        if (!sized) {  // as the store does: the policy learns the capacity when it first fills
          policy.SetCapacity(resident.size());
          sized = true;
        }
        auto v = policy.Victim(not_kept);
        if (!v) break;
        policy.OnRemove(*v);
        resident.erase(key_of[*v]);
        free_slots.push_back(*v);
      }
      if (resident.size() >= capacity) {
        refuse(k);
        continue;
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

Score ReplayTimeBound(const std::vector<Request>& trace, uint64_t capacity) {
  struct Reuse {
    uint64_t keep_ms;  // time the block must stay resident for this hit
    uint32_t tokens;
  };
  std::vector<Reuse> reuses;
  std::unordered_map<uint64_t, uint64_t> last_use;  // block -> time of its last access
  Score s;
  for (const Request& r : trace) {
    s.input_tokens += r.input_length;
    bool leading = true;
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      auto it = last_use.find(r.blocks[i]);
      leading = leading && it != last_use.end();
      if (leading) reuses.push_back({r.timestamp_ms - std::min(r.timestamp_ms, it->second), TokensInBlock(r, i)});
    }
    for (uint64_t b : r.blocks) last_use[b] = r.timestamp_ms;
  }
  if (trace.empty()) return s;
  uint64_t duration = trace.back().timestamp_ms - trace.front().timestamp_ms;
  double budget = double(capacity) * double(std::max<uint64_t>(duration, 1));
  // Cheapest block-milliseconds per token first.
  std::sort(reuses.begin(), reuses.end(), [](const Reuse& a, const Reuse& b) {
    return double(a.keep_ms) * b.tokens < double(b.keep_ms) * a.tokens;
  });
  double hit = 0;
  for (const Reuse& u : reuses) {
    if (u.tokens == 0) continue;
    if (double(u.keep_ms) <= budget) {
      budget -= double(u.keep_ms);
      hit += u.tokens;
    } else {
      hit += u.tokens * budget / double(u.keep_ms);
      break;
    }
  }
  s.hit_tokens = static_cast<uint64_t>(hit);
  return s;
}

}  // namespace gpucache::replay
