// gpucache-replay: hit ratio of each eviction policy on KV-cache traces, next to LRU, Belady and
// a time-aware bound.
//
//   gpucache-replay TRACE... [--capacities 0.01,0.05,0.1,0.2] [--policies a,b] [--limit N]
//                            [--mount DIR [--block-bytes N]]
//   gpucache-replay --generate KIND [--seed N]      # a synthetic trace (JSONL) to stdout
//
// A TRACE is a Mooncake-format JSONL file, or gen:KIND[:SEED] for a synthetic trace made in
// process (KIND multi-turn or agent, tests/bench/trace_gen.h; SEED 1 if omitted).
// Prints one line per trace, capacity and policy:
//   policy=NAME capacity=F hit_ratio=R belady=B ratio_to_belady=X blocks=N mode=MODE
//     lru=L gap_closed=G belady_time=T trace=NAME
// lru is LRU's hit ratio at that capacity, gap_closed (R - L) / (B - L), the share of the gap
// between LRU and Belady the policy closes. belady_time is an upper bound measured on the
// trace's clock (replay.h, ReplayTimeBound).
// In-process mode replays against the store's policy code. With --mount, each policy and
// capacity gets its own gpucachefs (the binary next to this one) mounted at DIR with a tenant
// quota of capacity x block bytes, and the trace is replayed with real files: stat to probe,
// open+read for hits, the commit protocol for misses (docs/eviction.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <sstream>

#include "tests/bench/mount_replay.h"
#include "tests/bench/replay.h"
#include "tests/bench/trace_gen.h"

namespace {

std::vector<std::string> Split(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// A file, or gen:KIND[:SEED].
std::vector<gpucache::replay::Request> Load(const std::string& spec, size_t limit) {
  using namespace gpucache::replay;
  if (spec.rfind("gen:", 0) != 0) return LoadTrace(spec, limit);
  std::vector<std::string> parts = Split(spec, ':');
  if (parts.size() < 2 || parts.size() > 3) throw std::invalid_argument("expected gen:KIND[:SEED], got " + spec);
  uint64_t seed = parts.size() == 3 ? std::stoull(parts[2]) : 1;
  std::vector<Request> trace = GenerateTrace(parts[1], seed);
  if (limit && trace.size() > limit) trace.resize(limit);
  return trace;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpucache;
  CLI::App app{"gpucache-replay: eviction policies on KV-cache traces, against LRU and Belady"};
  std::vector<std::string> traces;
  std::string capacities = "0.01,0.05,0.1,0.2", mount, generate;
  std::string policies;
  for (const std::string& p : PolicyNames()) policies += (policies.empty() ? "" : ",") + p;
  size_t limit = 0;
  uint64_t block_bytes = 4096, seed = 1;
  app.add_option("TRACE", traces, "Mooncake-format JSONL traces, or gen:KIND[:SEED]");
  app.add_option("--capacities", capacities, "cache sizes as fractions of the trace's unique blocks");
  app.add_option("--policies", policies, "comma-separated policy names");
  app.add_option("--limit", limit, "replay only the first N requests");
  app.add_option("--mount", mount, "replay through real gpucachefs mounts at this directory");
  app.add_option("--block-bytes", block_bytes, "bytes per block in --mount mode");
  app.add_option("--generate", generate, "print a synthetic trace of this kind (multi-turn, agent)");
  app.add_option("--seed", seed, "the synthetic trace's seed");
  CLI11_PARSE(app, argc, argv);

  if (!generate.empty()) {
    try {
      std::fputs(replay::ToJsonl(replay::GenerateTrace(generate, seed)).c_str(), stdout);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpucache-replay: %s\n", e.what());
      return 64;
    }
    return 0;
  }
  if (traces.empty()) {
    std::fprintf(stderr, "gpucache-replay: no TRACE (a file, or gen:multi-turn, gen:agent)\n");
    return 64;
  }
  for (const std::string& name : Split(policies)) {
    if (!MakePolicy(name)) {
      std::fprintf(stderr, "gpucache-replay: unknown policy %s\n", name.c_str());
      return 64;
    }
  }
  for (const std::string& spec : traces) {
    std::vector<replay::Request> trace;
    try {
      trace = Load(spec, limit);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpucache-replay: %s\n", e.what());
      return 2;
    }
    uint64_t unique = replay::UniqueBlocks(trace);
    const std::vector<std::vector<PolicyKey>> keys = replay::ReplayKeys(trace);
    std::string label = spec.substr(spec.find_last_of('/') + 1);
    std::fprintf(stderr, "gpucache-replay: %s: %zu requests, %llu unique blocks\n", label.c_str(),
                 trace.size(), static_cast<unsigned long long>(unique));
    for (const std::string& fraction : Split(capacities)) {
      double f = std::stod(fraction);
      uint64_t capacity = std::max<uint64_t>(1, static_cast<uint64_t>(f * double(unique)));
      double belady = replay::ReplayBelady(trace, capacity).ratio();
      double bound = replay::ReplayTimeBound(trace, capacity).ratio();
      auto lru_policy = MakePolicy("lru");
      double lru = replay::ReplayPolicy(trace, *lru_policy, capacity, &keys).ratio();
      for (const std::string& name : Split(policies)) {
        double hit;
        if (mount.empty()) {
          auto policy = MakePolicy(name);
          hit = replay::ReplayPolicy(trace, *policy, capacity, &keys).ratio();
        } else {
          auto r = replay::ReplayThroughMount(trace, name, capacity, block_bytes, mount, argv[0]);
          if (!r.ok) {
            std::fprintf(stderr, "gpucache-replay: %s\n", r.error.c_str());
            return 2;
          }
          hit = r.score.ratio();
        }
        double closed = belady > lru ? (hit - lru) / (belady - lru) : 0.0;
        std::printf("policy=%s capacity=%s hit_ratio=%.4f belady=%.4f ratio_to_belady=%.3f blocks=%llu "
                    "mode=%s lru=%.4f gap_closed=%.3f belady_time=%.4f trace=%s\n",
                    name.c_str(), fraction.c_str(), hit, belady, belady > 0 ? hit / belady : 0.0,
                    static_cast<unsigned long long>(capacity), mount.empty() ? "in-process" : "mount",
                    lru, closed, bound, label.c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
