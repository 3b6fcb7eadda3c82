#include <algorithm>
#include <cmath>
#include <list>
#include <set>
#include <unordered_map>

#include "store/eviction/count_min_sketch.h"
#include "store/eviction/eviction_policy.h"
#include "store/eviction/prefix_tracker.h"

namespace gpucache {
namespace {

// Blocks kept in an order that can change: (order key, block), smallest first.
class OrderedSet {
 public:
  void Put(PolicyKey key, uint64_t order) {
    Erase(key);
    order_[key] = order;
    set_.insert({order, key});
  }
  void Erase(PolicyKey key) {
    auto it = order_.find(key);
    if (it == order_.end()) return;
    set_.erase({it->second, key});
    order_.erase(it);
  }
  bool Contains(PolicyKey key) const { return order_.count(key) != 0; }
  size_t size() const { return set_.size(); }
  std::optional<PolicyKey> First(const EligibleFn& eligible) const {
    for (const auto& [order, key] : set_) {
      if (eligible(key)) return key;
    }
    return std::nullopt;
  }
  std::optional<PolicyKey> Oldest() const {
    if (set_.empty()) return std::nullopt;
    return set_.begin()->second;
  }

 private:
  std::set<std::pair<uint64_t, PolicyKey>> set_;
  std::unordered_map<PolicyKey, uint64_t> order_;
};

// The seed's rule: the oldest committed block first.
class OldestPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "oldest"; }
  void OnInsert(PolicyKey key, std::optional<PolicyKey>, bool) override { blocks_.Put(key, ++tick_); }
  void OnAccess(PolicyKey) override {}
  void OnRemove(PolicyKey key) override { blocks_.Erase(key); }
  std::optional<PolicyKey> Victim(const EligibleFn& eligible) override { return blocks_.First(eligible); }

 private:
  uint64_t tick_ = 0;
  OrderedSet blocks_;
};

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void OnInsert(PolicyKey key, std::optional<PolicyKey>, bool) override { blocks_.Put(key, ++tick_); }
  void OnAccess(PolicyKey key) override {
    if (blocks_.Contains(key)) blocks_.Put(key, ++tick_);
  }
  void OnRemove(PolicyKey key) override { blocks_.Erase(key); }
  std::optional<PolicyKey> Victim(const EligibleFn& eligible) override { return blocks_.First(eligible); }

 private:
  uint64_t tick_ = 0;
  OrderedSet blocks_;
};

// Least recently used leaf first; ancestors only when no leaf is eligible.
//
// Per block: one hash entry (last use, parent, children, which orders hold it, and its links
// in the recency list of all blocks) plus a (last use, key) entry in `leaves_` for a leaf and
// in `partials_` for a partial block. Every use takes a new, largest tick, so the list of all
// blocks in recency order is kept by appending at its back: no ordered set per block.
class PrefixLruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "prefix-lru"; }
  void OnInsert(PolicyKey key, std::optional<PolicyKey> parent, bool partial) override {
    Entry& e = *nodes_.try_emplace(key).first;
    Touch(e);
    e.second.has_parent = parent.has_value();
    e.second.parent = parent.value_or(0);
    if (parent) {
      auto p = nodes_.find(*parent);
      if (p != nodes_.end() && p->second.children++ == 0) Unlist(leaves_, *p, kLeaf);
    }
    List(leaves_, e, kLeaf);
    if (partial) List(partials_, e, kPartial);
  }
  void OnAccess(PolicyKey key) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    Touch(*it);
    if (it->second.children == 0) List(leaves_, *it, kLeaf);
  }
  void OnRemove(PolicyKey key) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    Node& n = it->second;
    Unlink(*it);
    Unlist(leaves_, *it, kLeaf);
    Unlist(partials_, *it, kPartial);
    bool has_parent = n.has_parent;
    PolicyKey parent = n.parent;
    nodes_.erase(it);
    if (!has_parent) return;
    auto p = nodes_.find(parent);
    if (p != nodes_.end() && p->second.children > 0 && --p->second.children == 0) {
      List(leaves_, *p, kLeaf);  // it became a leaf
    }
  }
  std::optional<PolicyKey> Victim(const EligibleFn& eligible) override {
    if (auto v = First(partials_, eligible)) return v;
    if (auto v = First(leaves_, eligible)) return v;
    for (const Entry* e = oldest_; e; e = e->second.newer) {
      if (eligible(e->first)) return e->first;
    }
    return std::nullopt;
  }

 private:
  using Order = std::set<std::pair<uint64_t, PolicyKey>>;
  enum Listed : uint8_t { kLeaf = 1, kPartial = 2 };
  struct Node;
  using Entry = std::pair<const PolicyKey, Node>;  // stable in an unordered_map
  struct Node {
    uint64_t last = 0;  // tick of the latest insert or use
    PolicyKey parent = 0;
    Entry* older = nullptr;  // the recency list of all blocks
    Entry* newer = nullptr;
    uint32_t children = 0;  // resident blocks inserted with this one as their parent
    bool has_parent = false;
    bool linked = false;    // in the recency list
    uint8_t listed = 0;     // Listed bits: the orders holding (last, key)
  };
  static std::optional<PolicyKey> First(const Order& order, const EligibleFn& eligible) {
    for (const auto& [tick, key] : order) {
      if (eligible(key)) return key;
    }
    return std::nullopt;
  }
  static void List(Order& order, Entry& e, Listed bit) {
    if (e.second.listed & bit) return;
    order.insert({e.second.last, e.first});
    e.second.listed |= bit;
  }
  static void Unlist(Order& order, Entry& e, Listed bit) {
    if (!(e.second.listed & bit)) return;
    order.erase({e.second.last, e.first});
    e.second.listed &= static_cast<uint8_t>(~bit);
  }
  void Unlink(Entry& e) {
    Node& n = e.second;
    if (!n.linked) return;
    (n.older ? n.older->second.newer : oldest_) = n.newer;
    (n.newer ? n.newer->second.older : newest_) = n.older;
    n.older = n.newer = nullptr;
    n.linked = false;
  }
  // A new, largest `last`: the block moves to the back of every order holding it.
  void Touch(Entry& e) {
    Node& n = e.second;
    uint8_t listed = n.listed;
    Unlink(e);
    Unlist(leaves_, e, kLeaf);
    Unlist(partials_, e, kPartial);
    n.last = ++tick_;
    n.older = newest_;
    (newest_ ? newest_->second.newer : oldest_) = &e;
    newest_ = &e;
    n.linked = true;
    if (listed & kLeaf) List(leaves_, e, kLeaf);
    if (listed & kPartial) List(partials_, e, kPartial);
  }
  uint64_t tick_ = 0;
  std::unordered_map<PolicyKey, Node> nodes_;
  Entry* oldest_ = nullptr;  // the recency list of all blocks, least recent first
  Entry* newest_ = nullptr;
  Order leaves_, partials_;  // partial blocks go first, least recent first
};

// Ours: W-TinyLFU restricted to leaves.
//
// New blocks enter a small recency window (1% of capacity). Blocks leaving the window join the
// main region's probation segment; a hit in probation promotes to the protected segment (80%
// of main), whose overflow is demoted back to probation. The victim is chosen among leaves:
// the window's oldest leaf (the admission candidate, once the window is full) against the
// main region's oldest leaf, and the one with the lower estimated frequency goes (the
// candidate on a tie, as in Caffeine: the incumbent has proven itself at least as often).
// Frequencies come from a count-min sketch of hits and misses that halves itself every
// 10 x capacity events, so popularity fades.
class PrefixTinyLfuPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "prefix-tinylfu"; }

  void SetCapacity(uint64_t blocks) override {
    capacity_ = std::max<uint64_t>(blocks, 1);
    window_cap_ = std::max<uint64_t>(capacity_ / 100, 1);  // Caffeine's starting point
    step_ = static_cast<double>(capacity_) / 16;
    Resize();
    sketch_.Resize(capacity_);
  }

  void OnInsert(PolicyKey key, std::optional<PolicyKey> parent, bool partial) override {
    if (capacity_ == 0) SetCapacity(1024);
    if (partial) partials_.Put(key, tick_ + 1);
    if (auto no_longer_leaf = tree_.Insert(key, parent)) Reindex(*no_longer_leaf);
    segment_[key] = kWindow;
    Touch(key);
    while (segments_[kWindow].size() > window_cap_) Move(*segments_[kWindow].Oldest(), kProbation);
  }

  void OnAccess(PolicyKey key) override {
    auto it = segment_.find(key);
    if (it == segment_.end()) return;
    Sample(true);
    sketch_.Increment(key);
    if (it->second == kProbation) {
      Move(key, kProtected);
      while (segments_[kProtected].size() > protected_cap_) {
        Move(*segments_[kProtected].Oldest(), kProbation);
      }
    }
    Touch(key);
    if (partials_.Contains(key)) partials_.Put(key, tick_);
  }

  void OnMiss(PolicyKey key) override {
    Sample(false);
    sketch_.Increment(key);
  }

  void OnRemove(PolicyKey key) override {
    auto it = segment_.find(key);
    if (it == segment_.end()) return;
    segments_[it->second].Erase(key);
    leaves_[it->second].Erase(key);
    partials_.Erase(key);
    segment_.erase(it);
    last_.erase(key);
    if (auto now_leaf = tree_.Remove(key)) Reindex(*now_leaf);
  }

  std::optional<PolicyKey> Victim(const EligibleFn& eligible) override {
    if (auto p = partials_.First(eligible)) return p;
    std::optional<PolicyKey> candidate;
    if (segments_[kWindow].size() >= window_cap_) candidate = leaves_[kWindow].First(eligible);
    std::optional<PolicyKey> victim = leaves_[kProbation].First(eligible);
    if (!victim) victim = leaves_[kProtected].First(eligible);
    if (candidate && victim) {
      return sketch_.Estimate(*candidate) > sketch_.Estimate(*victim) ? victim : candidate;
    }
    if (victim) return victim;
    if (auto c = leaves_[kWindow].First(eligible)) return c;
    // No eligible leaf anywhere: fall back to any eligible block, least recent first.
    for (int s : {kProbation, kProtected, kWindow}) {
      if (auto v = segments_[s].First(eligible)) return v;
    }
    return std::nullopt;
  }

 private:
  enum Segment { kWindow = 0, kProbation = 1, kProtected = 2 };

  void Resize() {
    window_cap_ = std::clamp<uint64_t>(window_cap_, 1, capacity_);
    protected_cap_ = (capacity_ - window_cap_) * 8 / 10;
  }

  // Caffeine's hill climber: every 10 x capacity requests, move the window/main boundary a
  // step in the direction that last improved the hit rate, reverse when it got worse, and
  // shrink the step as the hit rate settles. Recency-heavy workloads grow the window,
  // frequency-heavy ones shrink it; no per-trace constant.
  void Sample(bool hit) {
    hits_ += hit;
    if (++samples_ < 10 * capacity_) return;
    double rate = static_cast<double>(hits_) / static_cast<double>(samples_);
    double delta = rate - previous_rate_;
    if (previous_rate_ >= 0 && delta < 0) direction_ = -direction_;
    if (previous_rate_ >= 0 && std::abs(delta) < 0.05) step_ *= 0.98;
    else step_ = static_cast<double>(capacity_) / 16;
    int64_t target = static_cast<int64_t>(window_cap_) + static_cast<int64_t>(direction_ * step_);
    window_cap_ = static_cast<uint64_t>(std::max<int64_t>(target, 1));
    Resize();
    previous_rate_ = rate;
    hits_ = samples_ = 0;
  }

  void Touch(PolicyKey key) {
    last_[key] = ++tick_;
    Reindex(key);
  }
  void Move(PolicyKey key, Segment to) {
    Segment from = segment_[key];
    segments_[from].Erase(key);
    leaves_[from].Erase(key);
    segment_[key] = to;
    Reindex(key);
  }
  // Puts `key` in its segment's recency order, and in the leaf order if it is a leaf.
  void Reindex(PolicyKey key) {
    auto it = segment_.find(key);
    if (it == segment_.end()) return;
    uint64_t t = last_[key];
    segments_[it->second].Put(key, t);
    if (tree_.IsLeaf(key)) leaves_[it->second].Put(key, t);
    else leaves_[it->second].Erase(key);
  }

  uint64_t capacity_ = 0, window_cap_ = 1, protected_cap_ = 0, tick_ = 0;
  uint64_t hits_ = 0, samples_ = 0;
  double previous_rate_ = -1, step_ = 1, direction_ = 1;
  CountMinSketch sketch_;
  PrefixTracker tree_;
  std::unordered_map<PolicyKey, Segment> segment_;
  std::unordered_map<PolicyKey, uint64_t> last_;
  OrderedSet segments_[3], leaves_[3], partials_;
};


}  // namespace

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {"prefix-lru", "prefix-tinylfu", "lru", "oldest"};
  return names;
}

std::unique_ptr<EvictionPolicy> MakePolicy(std::string_view name) {
  if (name == "oldest") return std::make_unique<OldestPolicy>();
  if (name == "lru") return std::make_unique<LruPolicy>();
  if (name == "prefix-lru") return std::make_unique<PrefixLruPolicy>();
  if (name == "prefix-tinylfu") return std::make_unique<PrefixTinyLfuPolicy>();
  return nullptr;
}

}  // namespace gpucache
