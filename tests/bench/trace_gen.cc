#include "tests/bench/trace_gen.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <sstream>
#include <stdexcept>

namespace gpucache::replay {
namespace {

// Draws written out so that a seed means one trace (std::mt19937_64 is specified exactly; the
// standard distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Exponential(double rate) { return -std::log(1.0 - Uniform()) / rate; }
  double Normal() {  // Box-Muller, one of the pair
    double u = Uniform(), v = Uniform();
    return std::sqrt(-2.0 * std::log(1.0 - u)) * std::cos(2.0 * 3.14159265358979323846 * v);
  }
  double LogNormal(double median, double sigma) { return median * std::exp(sigma * Normal()); }
  uint32_t Tokens(double median, double sigma, uint32_t cap) {
    return static_cast<uint32_t>(std::clamp(LogNormal(median, sigma), 1.0, double(cap)));
  }
  int Below(int n) { return std::min(n - 1, static_cast<int>(Uniform() * n)); }
  // Zipf(1) over 0..n-1.
  int Zipf(int n) {
    double total = 0;
    for (int i = 1; i <= n; ++i) total += 1.0 / i;
    double x = Uniform() * total;
    for (int i = 1; i <= n; ++i) {
      x -= 1.0 / i;
      if (x < 0) return i - 1;
    }
    return n - 1;
  }

 private:
  std::mt19937_64 engine_;
};

// A prompt that grows: its full blocks' ids, and its length in tokens.
struct Context {
  std::vector<uint64_t> blocks;
  uint32_t tokens = 0;
};

class Ids {
 public:
  uint64_t Next() { return ++last_; }
  // Appends `n` tokens: every block they complete is new content, with a new id.
  void Grow(Context& c, uint32_t n) {
    c.tokens += n;
    while (c.blocks.size() < c.tokens / kTokensPerBlock) c.blocks.push_back(Next());
  }
  // Back to the first `tokens` tokens (an edit): the block they end in changes from here on.
  static void Truncate(Context& c, uint32_t tokens) {
    c.tokens = std::min(c.tokens, tokens);
    c.blocks.resize(c.tokens / kTokensPerBlock);
  }
  Request Emit(const Context& c, double t_s) {
    Request r;
    r.timestamp_ms = static_cast<uint64_t>(std::llround(t_s * 1000));
    r.input_length = c.tokens;
    r.blocks = c.blocks;
    if (c.tokens % kTokensPerBlock) r.blocks.push_back(Next());  // the partial tail: unique
    return r;
  }

 private:
  uint64_t last_ = 0;
};

// Pending requests in time order (ties in the order they were scheduled).
template <typename State>
class Schedule {
 public:
  void Add(double t, State s) { queue_.push(Item{t, seq_++, std::move(s)}); }
  bool Empty() const { return queue_.empty(); }
  std::pair<double, State> Pop() {
    Item top = queue_.top();
    queue_.pop();
    return {top.t, std::move(top.state)};
  }

 private:
  struct Item {
    double t;
    uint64_t seq;
    State state;
    bool operator<(const Item& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Item> queue_;
  uint64_t seq_ = 0;
};

}  // namespace

std::vector<Request> GenerateMultiTurn(const MultiTurnParams& p, uint64_t seed) {
  Rng rng(seed);
  Ids ids;
  std::vector<Context> prompts(p.system_prompts);
  for (Context& c : prompts) ids.Grow(c, kTokensPerBlock * (1 + rng.Below(p.system_prompt_blocks_max)));
  // A document's blocks depend on the prompt before it: one copy per system prompt, made when
  // first used.
  std::vector<int> document_blocks(p.documents);
  for (int& n : document_blocks) n = 2 + rng.Below(std::max(1, p.document_blocks_max - 1));
  std::map<std::pair<int, int>, Context> documents;  // (prompt, document) -> context
  struct Conversation {
    Context context;
    uint32_t message_start = 0;  // where the last user message began (an edit goes back there)
    int turns = 0;
  };
  Schedule<Conversation> schedule;
  for (double t = rng.Exponential(p.conversations_per_s); t < p.duration_s;
       t += rng.Exponential(p.conversations_per_s)) {
    Conversation c;
    int prompt = rng.Zipf(p.system_prompts);
    c.context = prompts[prompt];
    if (rng.Uniform() < p.document_share) {
      int rank = rng.Zipf(p.documents);
      int doc = (rank + static_cast<int>(t / p.document_period_s)) % p.documents;
      auto [it, fresh] = documents.try_emplace({prompt, doc}, c.context);
      if (fresh) ids.Grow(it->second, kTokensPerBlock * document_blocks[doc]);
      c.context = it->second;
    }
    c.message_start = c.context.tokens;
    ids.Grow(c.context, rng.Tokens(p.first_message_median, p.first_message_sigma, p.max_context / 2));
    schedule.Add(t, std::move(c));
  }
  std::vector<Request> out;
  while (!schedule.Empty()) {
    auto [t, c] = schedule.Pop();
    out.push_back(ids.Emit(c.context, t));
    c.turns++;
    double go_on = p.continue_base + p.continue_gain * (1 - std::exp(-c.turns / p.continue_scale));
    if (rng.Uniform() >= go_on) continue;
    uint32_t answer = rng.Tokens(p.answer_median, p.answer_sigma, 8192);
    double next = t + answer / p.decode_tokens_per_s + rng.LogNormal(p.think_median_s, p.think_sigma);
    uint32_t message = rng.Tokens(p.message_median, p.message_sigma, 16384);
    if (rng.Uniform() < p.edit_probability) {
      Ids::Truncate(c.context, c.message_start);  // the last message, rewritten
    } else {
      ids.Grow(c.context, answer);
      c.message_start = c.context.tokens;
    }
    ids.Grow(c.context, message);
    if (next < p.duration_s && c.context.tokens <= p.max_context) schedule.Add(next, std::move(c));
  }
  return out;
}

std::vector<Request> GenerateAgent(const AgentParams& p, uint64_t seed) {
  Rng rng(seed);
  Ids ids;
  std::vector<Context> tools(p.agent_types);
  for (int t = 0; t < p.agent_types; ++t) {
    ids.Grow(tools[t], kTokensPerBlock * std::max(1, p.tool_prompt_blocks * (t + 1) / 2));
  }
  struct Session {
    Context context;
    int fork_at = -1;  // the step after which it forks, or -1
    int steps = 0;
  };
  Schedule<Session> schedule;
  for (double t = rng.Exponential(p.sessions_per_s); t < p.duration_s;
       t += rng.Exponential(p.sessions_per_s)) {
    Session s;
    s.context = tools[rng.Zipf(p.agent_types)];
    ids.Grow(s.context, rng.Tokens(p.task_median, p.task_sigma, 16384));
    if (rng.Uniform() < p.fork_probability) s.fork_at = 1 + rng.Below(6);
    schedule.Add(t, std::move(s));
  }
  std::vector<Request> out;
  auto step = [&](double t, Session s) {
    uint32_t action = rng.Tokens(p.action_median, p.action_sigma, 4096);
    double next = t + action / p.decode_tokens_per_s +
                  rng.LogNormal(p.tool_latency_median_s, p.tool_latency_sigma);
    ids.Grow(s.context, action);
    ids.Grow(s.context, rng.Tokens(p.result_median, p.result_sigma, 16384));
    if (next < p.duration_s && s.context.tokens <= p.max_context) schedule.Add(next, std::move(s));
  };
  while (!schedule.Empty()) {
    auto [t, s] = schedule.Pop();
    out.push_back(ids.Emit(s.context, t));
    s.steps++;
    if (s.steps == s.fork_at) {
      int children = 2 + rng.Below(2);
      for (int i = 0; i < children; ++i) {
        Session child = s;
        child.fork_at = -1;
        ids.Grow(child.context, rng.Tokens(p.task_median / 4, p.task_sigma, 4096));  // its sub-task
        step(t, std::move(child));
      }
    }
    if (rng.Uniform() >= p.step_continue) continue;
    step(t, std::move(s));
  }
  return out;
}

std::vector<Request> GenerateTrace(const std::string& kind, uint64_t seed) {
  if (kind == "multi-turn") return GenerateMultiTurn(MultiTurnParams{}, seed);
  if (kind == "agent") return GenerateAgent(AgentParams{}, seed);
  throw std::invalid_argument("unknown trace kind " + kind + " (multi-turn, agent)");
}

std::string ToJsonl(const std::vector<Request>& trace) {
  std::ostringstream out;
  for (const Request& r : trace) {
    nlohmann::json j = {{"timestamp", r.timestamp_ms},
                        {"input_length", r.input_length},
                        {"output_length", 0},
                        {"hash_ids", r.blocks}};
    out << j.dump() << '\n';
  }
  return out.str();
}

}  // namespace gpucache::replay
