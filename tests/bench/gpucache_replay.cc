// gpucache-replay: hit ratio of each eviction policy on a KV-cache trace, next to Belady.
//
//   gpucache-replay TRACE [--capacities 0.05,0.1,0.2] [--policies a,b] [--limit N]
//                         [--mount DIR [--block-bytes N]]
//
// Prints one line per policy and capacity:
//   policy=NAME capacity=FRACTION hit_ratio=R belady=B ratio_to_belady=X blocks=N mode=MODE
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

namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpucache;
  CLI::App app{"gpucache-replay: eviction policies on a KV-cache trace, against Belady"};
  std::string trace_path, capacities = "0.05,0.1,0.2", mount;
  std::string policies;
  for (const std::string& p : PolicyNames()) policies += (policies.empty() ? "" : ",") + p;
  size_t limit = 0;
  uint64_t block_bytes = 4096;
  app.add_option("TRACE", trace_path, "Mooncake-format JSONL trace")->required();
  app.add_option("--capacities", capacities, "cache sizes as fractions of the trace's unique blocks");
  app.add_option("--policies", policies, "comma-separated policy names");
  app.add_option("--limit", limit, "replay only the first N requests");
  app.add_option("--mount", mount, "replay through real gpucachefs mounts at this directory");
  app.add_option("--block-bytes", block_bytes, "bytes per block in --mount mode");
  CLI11_PARSE(app, argc, argv);

  std::vector<replay::Request> trace;
  try {
    trace = replay::LoadTrace(trace_path, limit);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpucache-replay: %s\n", e.what());
    return 2;
  }
  uint64_t unique = replay::UniqueBlocks(trace);
  std::fprintf(stderr, "gpucache-replay: %zu requests, %llu unique blocks\n", trace.size(),
               static_cast<unsigned long long>(unique));
  for (const std::string& fraction : Split(capacities)) {
    double f = std::stod(fraction);
    uint64_t capacity = std::max<uint64_t>(1, static_cast<uint64_t>(f * double(unique)));
    double belady = replay::ReplayBelady(trace, capacity).ratio();
    for (const std::string& name : Split(policies)) {
      double hit;
      if (mount.empty()) {
        auto policy = MakePolicy(name);
        if (!policy) {
          std::fprintf(stderr, "gpucache-replay: unknown policy %s\n", name.c_str());
          return 64;
        }
        hit = replay::ReplayPolicy(trace, *policy, capacity).ratio();
      } else {
        auto r = replay::ReplayThroughMount(trace, name, capacity, block_bytes, mount, argv[0]);
        if (!r.ok) {
          std::fprintf(stderr, "gpucache-replay: %s\n", r.error.c_str());
          return 2;
        }
        hit = r.score.ratio();
      }
      std::printf("policy=%s capacity=%s hit_ratio=%.4f belady=%.4f ratio_to_belady=%.3f blocks=%llu mode=%s\n",
                  name.c_str(), fraction.c_str(), hit, belady, belady > 0 ? hit / belady : 0.0,
                  static_cast<unsigned long long>(capacity), mount.empty() ? "in-process" : "mount");
      std::fflush(stdout);
    }
  }
  return 0;
}
