#include "store/eviction/prefix_reuse.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <limits>
#include <unordered_map>
#include <vector>

#include "store/eviction/child_ring.h"
#include "store/eviction/seen_sketch.h"

namespace gpucache {
namespace {

constexpr Slot kNone = ~Slot{0};
constexpr Slot kOut = kNone - 1;  // prev_ of a slot in no list

// Classes: 0 partial; 1..36 new blocks, 1 + (kind * 3 + run) * 4 + grown_from_uses; 37..39
// blocks seen before, once, twice, three times or more.
constexpr int kClasses = 40;
constexpr int kFirstSeen = 37;
bool IsNew(int c) { return c >= 1 && c < kFirstSeen; }

// A block's features, 16 bits.
struct Features {
  uint16_t bits = 0;
  static constexpr int kPartial = 0, kFresh = 1, kSampled = 2, kUses = 3, kKind = 5, kRun = 7,
                       kGrownFromUses = 11;
  uint32_t Get(int at, int width) const { return (bits >> at) & ((1u << width) - 1); }
  void Set(int at, int width, uint32_t v) {
    uint16_t mask = static_cast<uint16_t>(((1u << width) - 1) << at);
    bits = static_cast<uint16_t>((bits & ~mask) | ((v << at) & mask));
  }
  bool partial() const { return Get(kPartial, 1); }
  bool fresh() const { return Get(kFresh, 1); }  // not used since it was committed
  bool sampled() const { return Get(kSampled, 1); }
  uint32_t uses() const { return Get(kUses, 2); }  // seen before: 0..3 (3: three or more)
  uint32_t kind() const { return Get(kKind, 2); }  // 0 chain end, 1 branch, 2 hub
  uint32_t run() const { return Get(kRun, 4); }    // new blocks of the request up to it, 1..15
  uint32_t grown_from_uses() const { return Get(kGrownFromUses, 2); }
  int Class() const {
    if (partial()) return 0;
    if (uses() > 0) return kFirstSeen - 1 + static_cast<int>(uses());
    int run_bucket = run() <= 1 ? 0 : run() <= 7 ? 1 : 2;
    return 1 + (static_cast<int>(kind()) * 3 + run_bucket) * 4 + static_cast<int>(grown_from_uses());
  }
};

class PrefixReusePolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "prefix-reuse"; }

  void SetCapacity(uint64_t blocks) override {
    capacity_ = std::max<uint64_t>(blocks, 1);
    sketch_.Resize(capacity_);
    evict_age_ = static_cast<double>(std::max<uint64_t>(capacity_, 64));
    SetTick(TickShiftFor(capacity_));
  }
  void SetKeyOf(KeyOfFn key_of) override { key_of_ = std::move(key_of); }
  void Reserve(size_t slots) override {
    for (auto* v : {&prev_, &next_}) v->reserve(slots);
    last_.reserve(slots);
    tree_.Reserve(slots);
    features_.reserve(slots);
    // A restart: sized for what it holds already, but never below the size it has before any
    // Reserve (a daemon starting empty reserves a few slots; sized for those, the sketch would
    // mistake new blocks for seen ones, and decide unlike the same trace replayed in process).
    if (capacity_ == 0) sketch_.Resize(std::max<uint64_t>(slots, SeenSketch::kUnsizedKeys));
  }

  void OnInsert(Slot slot, std::optional<Slot> parent, bool partial, PolicyKey key) override {
    if (Contains(slot)) OnRemove(slot);
    Tick();
    if (slot >= prev_.size()) Resize(size_t{slot} + 1);
    if (auto g = ghosts_.find(key); g != ghosts_.end()) {  // a sampled block came back
      Learn(g->second.cls, now32() - g->second.time, g->second.resolved);
      ghosts_.erase(g);
    }
    Features f;
    f.Set(Features::kPartial, 1, partial);
    f.Set(Features::kFresh, 1, 1);
    f.Set(Features::kSampled, 1, Sampled(key));
    f.Set(Features::kUses, 2, std::min<uint32_t>(3, sketch_.Estimate(key)));
    sketch_.Add(key);
    Slot p = parent && *parent != slot && Contains(*parent) ? *parent : kNone;
    if (p == kNone) {
      f.Set(Features::kRun, 4, 1);
    } else if (features_[p].fresh()) {  // the same request's chain, growing
      f.Set(Features::kKind, 2, features_[p].kind());
      f.Set(Features::kRun, 4, std::min<uint32_t>(15, features_[p].run() + 1));
      f.Set(Features::kGrownFromUses, 2, features_[p].grown_from_uses());
    } else {  // a used block, grown from: at its end, as a branch, or off a hub
      uint32_t full_children = FullChildren(p, 3);
      f.Set(Features::kKind, 2, full_children == 0 ? 0 : full_children < 3 ? 1 : 2);
      f.Set(Features::kRun, 4, 1);
      f.Set(Features::kGrownFromUses, 2, features_[p].uses());
    }
    features_[slot] = f;
    last_[slot] = now16();
    Link(slot);
    tree_.Attach(slot, p);
  }

  void OnAccess(Slot slot) override {
    Tick();
    if (!Contains(slot)) return;
    Features& f = features_[slot];
    if (f.sampled()) Learn(f.Class(), GapOf(slot), false);
    Unlink(slot);
    f.Set(Features::kUses, 2, std::min<uint32_t>(3, f.uses() + 1));
    f.Set(Features::kFresh, 1, 0);
    last_[slot] = now16();
    Link(slot);
  }

  void OnChildFound(Slot parent, Slot child) override {
    if (parent == child || !Contains(parent) || !Contains(child)) return;
    // Not its own parent's parent: blocks with equal hashes (one-hash chains) are no loop.
    if (tree_.parent(child) == kNone && tree_.parent(parent) != child) tree_.Adopt(child, parent);
  }

  void OnRemove(Slot slot) override {
    if (!Contains(slot)) return;
    const Features f = features_[slot];
    uint32_t age = AgeOf(slot);
    evict_age_ += (static_cast<double>(age) - evict_age_) / kEvictAgeSmoothing;
    if (f.sampled() && key_of_) Remember(key_of_(slot), f.Class(), GapOf(slot));
    Unlink(slot);
    tree_.Detach(slot);  // orphans its children
  }

  std::optional<Slot> Victim(const EligibleFn& eligible) override {
    if (log_p_stale_) {
      for (int c = 0; c < kClasses; ++c) log_p_[c] = std::log(again_[c] / total_[c]);
      log_p_stale_ = false;
    }
    const uint32_t probation = static_cast<uint32_t>(evict_age_ / kProbationOneIn);
    // Leaves past probation, then any leaf, then any block (an ancestor whose descendants are
    // all refused): in each list the first candidate is its oldest, so its best.
    for (int pass = 0; pass < 3; ++pass) {
      Slot best = kNone;
      double best_score = 0;
      for (int c = 0; c < kClasses; ++c) {
        for (Slot s = head_[c]; s != kNone; s = next_[s]) {
          if ((pass < 2 && tree_.HasChildren(s)) || !eligible(s)) continue;
          uint32_t age = AgeOf(s);
          if (pass == 0 && age < probation) break;
          double score = log_p_[c] - static_cast<double>(age) / tau_;
          if (best == kNone || score < best_score) {
            best = s;
            best_score = score;
          }
          break;
        }
      }
      if (best != kNone) return best;
    }
    return std::nullopt;
  }

  void SetAside(Slot slot) override {
    if (!Contains(slot)) return;
    Aside a{.slot = slot, .prev = prev_[slot]};
    Unlink(slot);
    a.tree = tree_.Detach(slot);
    aside_.push_back(a);
  }
  void PutBack() override {
    // Last first, so that every block finds its list and the tree as it left them.
    for (auto it = aside_.rbegin(); it != aside_.rend(); ++it) {
      tree_.Reattach(it->tree);
      LinkAfter(it->slot, it->prev);
    }
    ClearAside(aside_);
  }

 private:
  struct Aside {
    Slot slot, prev;
    ChildRing::Detached tree;
  };
  struct Ghost {
    uint32_t time;    // of the block's last use
    uint8_t cls;
    bool resolved;    // its outcome for P is counted (it was already older than Horizon())
  };

  bool Contains(Slot s) const { return s < prev_.size() && prev_[s] != kOut; }
  uint32_t now32() const { return static_cast<uint32_t>(now_); }
  // The coarse clock blocks keep their last use in: one tick is 2^shift_ events.
  uint16_t now16() const { return static_cast<uint16_t>(now_ >> shift_); }
  // Events since the block's last use, in whole ticks (off by up to a tick either way: both
  // ends are rounded to their tick).
  uint32_t AgeOf(Slot s) const {
    uint64_t age = uint64_t{static_cast<uint16_t>(now16() - last_[s])} << shift_;
    return static_cast<uint32_t>(std::min<uint64_t>(age, std::numeric_limits<uint32_t>::max()));
  }
  // As AgeOf, but for what the policy learns: an age Clamp held is longer than the clock can
  // tell, so it counts as "never" (not as a reuse at the clamp, which would pull tau down).
  uint32_t GapOf(Slot s) const {
    return static_cast<uint16_t>(now16() - last_[s]) >= kMaxAgeTicks ? std::numeric_limits<uint32_t>::max()
                                                                     : AgeOf(s);
  }
  // A tick of about 1/1024 to 1/2048 of the capacity: ages keep that resolution, and reach
  // 16 to 32 capacities before Clamp holds them there.
  static int TickShiftFor(uint64_t capacity) {
    return std::max(0, static_cast<int>(std::bit_width(capacity)) - 11);
  }
  // Another tick: every block's last use is carried over, to the coarser or finer tick.
  void SetTick(int shift) {
    if (shift == shift_) return;
    for (Slot s = 0; s < last_.size(); ++s) {
      if (!Contains(s)) continue;
      uint32_t age = AgeOf(s);
      last_[s] = static_cast<uint16_t>((now_ >> shift) - std::min<uint64_t>(age >> shift, kMaxAgeTicks));
    }
    shift_ = shift;
    Clamp();
  }
  static bool Sampled(PolicyKey key) { return (key >> 40) % kSampleOneIn == 0; }

  void Resize(size_t n) {
    prev_.resize(n, kOut);
    next_.resize(n, kNone);
    tree_.Resize(n);
    last_.resize(n, 0);
    features_.resize(n);
  }
  void Link(Slot s) {
    int c = features_[s].Class();
    prev_[s] = tail_[c];
    next_[s] = kNone;
    (tail_[c] == kNone ? head_[c] : next_[tail_[c]]) = s;
    tail_[c] = s;
  }
  // Puts `s` back in its class's list after `after` (kNone: first), where it was.
  void LinkAfter(Slot s, Slot after) {
    int c = features_[s].Class();
    Slot next = after == kNone ? head_[c] : next_[after];
    prev_[s] = after;
    next_[s] = next;
    (after == kNone ? head_[c] : next_[after]) = s;
    (next == kNone ? tail_[c] : prev_[next]) = s;
  }
  void Unlink(Slot s) {
    int c = features_[s].Class();
    (prev_[s] == kNone ? head_[c] : next_[prev_[s]]) = next_[s];
    (next_[s] == kNone ? tail_[c] : prev_[next_[s]]) = prev_[s];
    prev_[s] = kOut;
  }
  // Children of `p` that are full blocks, counted up to `enough` (and at most 8 looked at).
  uint32_t FullChildren(Slot p, uint32_t enough) const {
    Slot last = tree_.newest_child(p);
    if (last == kNone) return 0;
    uint32_t full = 0, looked = 0;
    Slot c = last;
    do {
      c = tree_.next_sibling(c);
      full += !features_[c].partial();
    } while (c != last && full < enough && ++looked < 8);
    return looked >= 8 ? enough : full;
  }

  // One more event (a commit or a use) on the clock.
  void Tick() {
    ++now_;
    // Until the capacity is known, the tick grows with the clock: no age is ever clamped,
    // and ages keep 1/2^15 of the time since the start.
    if (capacity_ == 0 && now_ == (uint64_t{kMaxAgeTicks} << shift_)) SetTick(shift_ + 1);
    if ((now_ & ((kClampEveryTicks << shift_) - 1)) == 0) Clamp();
    while (!expiry_.empty() && now_ - expiry_.front().first > kGhostHorizon * tau_) Forget();
    if ((now_ & (kFadeEvery - 1)) == 0) {  // the counts fade: half-life ~700k events
      for (int c = 0; c < kClasses; ++c) {
        again_[c] *= kFade;
        total_[c] *= kFade;
      }
    }
  }
  // Ages are 16-bit differences of ticks: every 2^14 ticks none is let grow past 2^15, so
  // none reaches 2^16 and wraps. Older blocks all look 2^15 ticks old: by then (16 capacities
  // of events at least) the decay has ranked them below any block used since.
  void Clamp() {
    const uint16_t now = now16();
    for (Slot s = 0; s < last_.size(); ++s) {
      if (Contains(s) && static_cast<uint16_t>(now - last_[s]) > kMaxAgeTicks) {
        last_[s] = static_cast<uint16_t>(now - kMaxAgeTicks);
      }
    }
  }
  void Count(int cls, bool again) {
    again_[cls] += again;
    total_[cls] += 1;
    log_p_stale_ = true;
  }
  // A sampled block of class `cls` was used again `gap` events after its last use.
  // P counts a reuse within tau, but no later than half the mean age at which blocks leave: a
  // reuse that comes after a cache of this size would have let the block go is a miss whatever
  // its class, so in a small cache (1% of a trace: blocks leave at a third of tau) P ranks the
  // classes by the reuses that come soon enough to be hits.
  double Horizon() const { return std::min(tau_, evict_age_ * kHorizonOfEvictAge); }
  void Learn(int cls, uint32_t gap, bool resolved) {
    if (!resolved) Count(cls, gap <= Horizon());
    if (IsNew(cls) && gap <= kGhostHorizon * tau_) {  // tau: the mean time to a first reuse
      gap_sum_ = gap_sum_ * kFade + gap;
      gaps_ = gaps_ * kFade + 1;
      if (gaps_ > kGapsBeforeTau) tau_ = std::max(kTauMin, gap_sum_ / gaps_);
    }
  }
  // Drops the oldest ghost.
  void Forget() {
    auto [time, key] = expiry_.front();
    expiry_.pop_front();
    auto g = ghosts_.find(key);
    if (g == ghosts_.end() || g->second.time != static_cast<uint32_t>(time)) return;  // came back
    if (!g->second.resolved && now_ - time > Horizon()) Count(g->second.cls, false);
    ghosts_.erase(g);
  }
  // A sampled block left, `age` events after its last use: followed until it comes back.
  void Remember(PolicyKey key, int cls, uint32_t age) {
    if (age > Horizon()) Count(cls, false);
    if (age > kGhostHorizon * tau_) return;
    ghosts_[key] = Ghost{static_cast<uint32_t>(now_ - age), static_cast<uint8_t>(cls), age > Horizon()};
    expiry_.emplace_back(now_ - age, key);
    // Bounded: past the limit the oldest ghosts go, counted if their outcome is known (older
    // than tau: not used again within tau), else not counted either way.
    size_t limit = std::max<size_t>(256, capacity_ / kGhostsOneIn);
    while (ghosts_.size() > limit && !expiry_.empty()) Forget();
  }

  // Fixed constants: none is tuned to a trace; what depends on the workload (P per class, tau,
  // the age blocks are evicted at) is learned (docs/eviction.md has how much they matter).
  static constexpr uint64_t kSampleOneIn = 16;
  static constexpr uint64_t kGhostsOneIn = 16;  // ghosts kept: capacity / 16 at most
  // tau starts far above any reuse time and comes down to the mean of the first reuses seen
  // within 4 tau (from below, the estimate could settle on a short horizon's mean).
  static constexpr double kTauStart = double(uint64_t{1} << 24);
  static constexpr uint64_t kClampEveryTicks = uint64_t{1} << 14;
  static constexpr uint32_t kMaxAgeTicks = 1u << 15;
  // A ghost is followed for 4 tau: long enough to see most first reuses (the mean is tau),
  // short enough that the table stays small.
  static constexpr double kGhostHorizon = 4;
  // Counts fade by kFade every kFadeEvery events (half-life ~700k events: a few hours of a
  // busy daemon), so the estimates follow a workload that changes.
  static constexpr uint64_t kFadeEvery = 1024;
  static constexpr double kFade = 0.999;
  static constexpr double kGapsBeforeTau = 20;  // first reuses seen before tau is trusted
  static constexpr double kTauMin = 64;         // events; a floor against a degenerate start
  // Probation: a block younger than 1/20 of the mean age at eviction is evicted only when no
  // older leaf is eligible (the request that commits it is still committing its chain).
  static constexpr double kProbationOneIn = 20;
  static constexpr double kEvictAgeSmoothing = 1024;  // evictions in the mean age's window
  static constexpr double kHorizonOfEvictAge = 0.5;   // Horizon(): 0.25-0.7 measure alike

  // Per slot.
  std::vector<Slot> prev_, next_;  // in its class's list, oldest first
  ChildRing tree_;  // as in prefix-lru
  std::vector<Aside> aside_;  // set aside for the request being made room for
  std::vector<uint16_t> last_;     // coarse clock (now16) at its last commit or use
  std::vector<Features> features_;
  // Per class.
  std::array<Slot, kClasses> head_ = MakeNone(), tail_ = MakeNone();
  // Priors, worth two observations: P = 1/2, but 1/20 for partial blocks (a prompt's tail is
  // reused only by a request with exactly its tokens); the counts fade, so data outweighs them.
  std::array<double, kClasses> again_ = Priors(), total_ = Filled(2.0), log_p_ = Filled(0.0);
  bool log_p_stale_ = true;

  uint64_t now_ = 0, capacity_ = 0;
  int shift_ = 0;  // TickShiftFor(capacity_) once it is known
  double tau_ = kTauStart, evict_age_ = 1024, gap_sum_ = 0, gaps_ = 0;
  SeenSketch sketch_;
  KeyOfFn key_of_;
  std::unordered_map<PolicyKey, Ghost> ghosts_;
  std::deque<std::pair<uint64_t, PolicyKey>> expiry_;  // (time of last use, key), oldest first

  static std::array<Slot, kClasses> MakeNone() {
    std::array<Slot, kClasses> a;
    a.fill(kNone);
    return a;
  }
  static std::array<double, kClasses> Priors() {
    std::array<double, kClasses> a = Filled(1.0);
    a[0] = 0.1;
    return a;
  }
  static std::array<double, kClasses> Filled(double v) {
    std::array<double, kClasses> a;
    a.fill(v);
    return a;
  }
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakePrefixReusePolicy() { return std::make_unique<PrefixReusePolicy>(); }

}  // namespace gpucache
