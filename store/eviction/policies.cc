#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "store/eviction/child_ring.h"
#include "store/eviction/count_min_sketch.h"
#include "store/eviction/eviction_policy.h"
#include "store/eviction/prefix_reuse.h"
#include "store/eviction/prefix_tracker.h"
#include "store/eviction/slot_list.h"

namespace gpucache {
namespace {

// Blocks kept in an order that can change: (order key, slot), smallest first. Node-based: only
// prefix-tinylfu uses it.
class OrderedSet {
 public:
  void Put(Slot key, uint64_t order) {
    Erase(key);
    order_[key] = order;
    set_.insert({order, key});
  }
  void Erase(Slot key) {
    auto it = order_.find(key);
    if (it == order_.end()) return;
    set_.erase({it->second, key});
    order_.erase(it);
  }
  bool Contains(Slot key) const { return order_.count(key) != 0; }
  std::optional<uint64_t> OrderOf(Slot key) const {
    auto it = order_.find(key);
    return it == order_.end() ? std::nullopt : std::optional(it->second);
  }
  size_t size() const { return set_.size(); }
  std::optional<Slot> First(const EligibleFn& eligible) const {
    for (const auto& [order, key] : set_) {
      if (eligible(key)) return key;
    }
    return std::nullopt;
  }
  std::optional<Slot> Oldest() const {
    if (set_.empty()) return std::nullopt;
    return set_.begin()->second;
  }

 private:
  std::set<std::pair<uint64_t, Slot>> set_;
  std::unordered_map<Slot, uint64_t> order_;
};

std::optional<Slot> Found(Slot s) { return s == SlotList::kNone ? std::nullopt : std::optional(s); }

// "oldest" (FIFO) and "lru": one recency list, 8 bytes a slot. FIFO never moves a block on use.
class ListPolicy final : public EvictionPolicy {
 public:
  explicit ListPolicy(bool follow_use) : follow_use_(follow_use) {}
  std::string_view name() const override { return follow_use_ ? "lru" : "oldest"; }
  void OnInsert(Slot slot, std::optional<Slot>, bool, PolicyKey) override {
    blocks_.MoveToBack(slot);
  }
  void OnAccess(Slot slot) override {
    if (follow_use_ && blocks_.Contains(slot)) blocks_.MoveToBack(slot);
  }
  void OnRemove(Slot slot) override { blocks_.Remove(slot); }
  std::optional<Slot> Victim(const EligibleFn& eligible) override {
    return Found(blocks_.FirstWhere(eligible));
  }
  void Reserve(size_t slots) override { blocks_.Reserve(slots); }
  void SetAside(Slot slot) override {
    if (!blocks_.Contains(slot)) return;
    aside_.push_back({slot, blocks_.prev(slot)});
    blocks_.Remove(slot);
  }
  void PutBack() override {
    // Last first: each block goes back after the one before it when it left, there again.
    for (auto it = aside_.rbegin(); it != aside_.rend(); ++it) blocks_.InsertAfter(it->slot, it->prev);
    ClearAside(aside_);
  }

 private:
  struct Aside {
    Slot slot, prev;
  };
  const bool follow_use_;
  SlotList blocks_;  // least recently inserted (or used) first
  std::vector<Aside> aside_;  // set aside for the request being made room for
};

// Least recently used leaf first; ancestors only when no leaf is eligible.
//
// Per slot, in flat arrays: its links in the recency list (partial blocks first, then full
// ones, each least recent first), a partial bit and its place in the prefix tree (ChildRing):
// 20 bytes and a bit. Leaves are the blocks with no child, so the least recent leaf is the
// first childless block of the recency list; the walk to it passes the ancestors of the oldest
// chains (about a chain's length of blocks) and those `eligible` refuses.
class PrefixLruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "prefix-lru"; }
  void OnInsert(Slot slot, std::optional<Slot> parent, bool partial, PolicyKey) override {
    if (recency_.Contains(slot)) OnRemove(slot);
    if (slot >= partial_.size()) Resize(size_t{slot} + 1);
    partial_[slot] = partial;
    Link(slot);
    tree_.Attach(slot, parent && *parent != slot && recency_.Contains(*parent) ? *parent : kNone);
  }
  void OnAccess(Slot slot) override {
    if (!recency_.Contains(slot)) return;
    Unlink(slot);
    Link(slot);
  }
  void OnChildFound(Slot parent, Slot child) override {
    if (parent == child || !recency_.Contains(parent) || !recency_.Contains(child)) return;
    // Not its own parent's parent: blocks with equal hashes (one-hash chains) are no loop.
    if (tree_.parent(child) == kNone && tree_.parent(parent) != child) tree_.Adopt(child, parent);
  }
  void OnRemove(Slot slot) override {
    if (!recency_.Contains(slot)) return;
    Unlink(slot);
    tree_.Detach(slot);
  }
  std::optional<Slot> Victim(const EligibleFn& eligible) override {
    // The list holds partial blocks before full ones: the first leaf is a partial block no block
    // continues if there is one (a partial block with children is an ancestor like any other).
    Slot leaf = recency_.FirstWhereIn(recency_.front(), kNone,
                                      [&](Slot s) { return !tree_.HasChildren(s) && eligible(s); });
    if (leaf != kNone) return leaf;
    return Found(recency_.FirstWhereIn(recency_.front(), kNone, eligible));
  }
  void Reserve(size_t slots) override {
    recency_.Reserve(slots);
    partial_.reserve(slots);
    tree_.Reserve(slots);
  }
  void SetAside(Slot slot) override {
    if (!recency_.Contains(slot)) return;
    Aside a{.slot = slot, .prev = recency_.prev(slot), .first_full = slot == first_full_};
    Unlink(slot);
    a.tree = tree_.Detach(slot);
    aside_.push_back(a);
  }
  void PutBack() override {
    // Last first, so that every block finds the list and the tree as it left them.
    for (auto it = aside_.rbegin(); it != aside_.rend(); ++it) {
      tree_.Reattach(it->tree);
      recency_.InsertAfter(it->slot, it->prev);
      if (it->first_full) first_full_ = it->slot;
    }
    ClearAside(aside_);
  }

 private:
  struct Aside {
    Slot slot, prev;
    bool first_full;
    ChildRing::Detached tree;
  };
  static constexpr Slot kNone = SlotList::kNone;
  void Resize(size_t n) {
    tree_.Resize(n);
    partial_.resize(n, false);
  }
  // Puts `slot` last among the blocks of its kind: partial blocks all come before full ones.
  void Link(Slot slot) {
    if (!partial_[slot] || first_full_ == kNone) {
      recency_.PushBack(slot);
      if (!partial_[slot] && first_full_ == kNone) first_full_ = slot;
    } else {
      recency_.InsertBefore(slot, first_full_);
    }
  }
  void Unlink(Slot slot) {
    if (slot == first_full_) first_full_ = recency_.next(slot);
    recency_.Remove(slot);
  }
  // Every block, the partial ones first (least recently used first), then the full ones (least
  // recently used first), from first_full_ on: the order of two lists in the links of one, so
  // that a block costs 8 bytes of links rather than 16. Partial blocks go first.
  SlotList recency_;
  Slot first_full_ = kNone;
  std::vector<bool> partial_;
  ChildRing tree_;
  std::vector<Aside> aside_;  // set aside for the request being made room for
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

  void OnInsert(Slot key, std::optional<Slot> parent, bool partial, PolicyKey digest) override {
    if (capacity_ == 0) SetCapacity(1024);
    if (key >= digests_.size()) digests_.resize(size_t{key} + 1);
    digests_[key] = digest;
    if (partial) partials_.Put(key, tick_ + 1);
    std::optional<PolicyKey> up;
    if (parent) up = *parent;
    if (auto no_longer_leaf = tree_.Insert(key, up)) Reindex(static_cast<Slot>(*no_longer_leaf));
    segment_[key] = kWindow;
    Touch(key);
    while (segments_[kWindow].size() > window_cap_) Move(*segments_[kWindow].Oldest(), kProbation);
  }

  void OnAccess(Slot key) override {
    auto it = segment_.find(key);
    if (it == segment_.end()) return;
    Sample(true);
    sketch_.Increment(digests_[key]);
    if (it->second == kProbation) {
      Move(key, kProtected);
      while (segments_[kProtected].size() > protected_cap_) {
        Move(*segments_[kProtected].Oldest(), kProbation);
      }
    }
    Touch(key);
    if (partials_.Contains(key)) partials_.Put(key, tick_);
  }

  void OnChildFound(Slot parent, Slot child) override {
    if (parent == child || !segment_.count(parent) || !segment_.count(child)) return;
    if (auto no_longer_leaf = tree_.Adopt(child, parent)) Reindex(static_cast<Slot>(*no_longer_leaf));
  }

  void OnMiss(PolicyKey key) override {
    Sample(false);
    sketch_.Increment(key);
  }

  void OnRemove(Slot key) override {
    auto it = segment_.find(key);
    if (it == segment_.end()) return;
    segments_[it->second].Erase(key);
    leaves_[it->second].Erase(key);
    partials_.Erase(key);
    segment_.erase(it);
    last_.erase(key);
    if (auto now_leaf = tree_.Remove(key)) Reindex(static_cast<Slot>(*now_leaf));
  }

  void SetAside(Slot key) override {
    auto it = segment_.find(key);
    if (it == segment_.end() || aside_keys_.count(key)) return;
    Aside a{.key = key, .partial = partials_.OrderOf(key)};
    segments_[it->second].Erase(key);
    leaves_[it->second].Erase(key);
    partials_.Erase(key);
    aside_keys_.insert(key);
    auto [node, now_leaf] = tree_.Take(key);
    a.node = node;
    if (now_leaf) Reindex(static_cast<Slot>(*now_leaf));
    aside_.push_back(a);
  }
  void PutBack() override {
    for (auto it = aside_.rbegin(); it != aside_.rend(); ++it) {
      aside_keys_.erase(it->key);
      if (auto no_longer_leaf = tree_.Restore(it->key, it->node)) {
        Reindex(static_cast<Slot>(*no_longer_leaf));
      }
      Reindex(it->key);
      if (it->partial) partials_.Put(it->key, *it->partial);
    }
    ClearAside(aside_);
  }

  std::optional<Slot> Victim(const EligibleFn& eligible) override {
    // A partial block first, unless a block continues it (then only when no leaf is left).
    if (auto p = partials_.First([&](Slot s) { return tree_.IsLeaf(s) && eligible(s); })) return p;
    std::optional<Slot> candidate;
    if (segments_[kWindow].size() >= window_cap_) candidate = leaves_[kWindow].First(eligible);
    std::optional<Slot> victim = leaves_[kProbation].First(eligible);
    if (!victim) victim = leaves_[kProtected].First(eligible);
    if (candidate && victim) {
      uint32_t candidate_uses = sketch_.Estimate(digests_[*candidate]);
      return candidate_uses > sketch_.Estimate(digests_[*victim]) ? victim : candidate;
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

  void Touch(Slot key) {
    last_[key] = ++tick_;
    Reindex(key);
  }
  void Move(Slot key, Segment to) {
    Segment from = segment_[key];
    segments_[from].Erase(key);
    leaves_[from].Erase(key);
    segment_[key] = to;
    Reindex(key);
  }
  // Puts `key` in its segment's recency order, and in the leaf order if it is a leaf.
  void Reindex(Slot key) {
    auto it = segment_.find(key);
    if (it == segment_.end() || aside_keys_.count(key)) return;
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
  std::unordered_map<Slot, Segment> segment_;
  std::unordered_map<Slot, uint64_t> last_;
  std::vector<PolicyKey> digests_;  // per slot: what the sketch counts it by
  OrderedSet segments_[3], leaves_[3], partials_;
  // Set aside for the request being made room for: what puts each back.
  struct Aside {
    Slot key;
    std::optional<uint64_t> partial;  // its place among partial blocks
    PrefixTracker::Node node;
  };
  std::vector<Aside> aside_;
  std::unordered_set<Slot> aside_keys_;
};


}  // namespace

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {"prefix-lru", "prefix-reuse", "prefix-tinylfu", "lru",
                                                 "oldest"};
  return names;
}

std::unique_ptr<EvictionPolicy> MakePolicy(std::string_view name) {
  if (name == "oldest") return std::make_unique<ListPolicy>(false);
  if (name == "lru") return std::make_unique<ListPolicy>(true);
  if (name == "prefix-lru") return std::make_unique<PrefixLruPolicy>();
  if (name == "prefix-tinylfu") return std::make_unique<PrefixTinyLfuPolicy>();
  if (name == "prefix-reuse") return MakePrefixReusePolicy();
  return nullptr;
}

}  // namespace gpucache
