// A model-based random tester (in the spirit of fsx): random operations through a real mount and
// its .gpucache/ctl channel, each checked against an in-memory model of what the product
// promises. Operations: create a .part, open it for writing, write at random offsets (holes
// included), set a right or wrong identity, close, commit by rename, read (whole or a range),
// stat, list, unlink a block or a .part, pin and unpin, evict, lookup (hit, prefix hit, miss),
// damage a block file behind the daemon's back, fence, restart (clean or SIGKILL), and compare
// the tenant counters. Also the inputs that found issue 13's defects: reopening a .part with
// O_TRUNC or O_APPEND, a second member of the tenant touching another's .part, names of 255
// and 256 bytes, and commits larger than anything could make room for. The first divergence stops the run and prints the seed and the last
// operations; GPUCACHE_SEED=<seed> replays it (GPUCACHE_MODEL_OPS=<n> changes the length).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/reliability/model_tester.h"

namespace gpucache {
namespace {

using namespace test;

TEST_CASE("Reliability model: random operations through the mount agree with the model") {
  uint64_t seed = TestSeed();
  int ops = 15000;
  if (const char* n = std::getenv("GPUCACHE_MODEL_OPS")) ops = std::atoi(n);
  std::printf("model: seed=%llu ops=%d\n", static_cast<unsigned long long>(seed), ops);
  INFO("GPUCACHE_SEED=" << seed);
  // A reservation lease longer than the run: nothing expires behind the model's back; a
  // retained-byte limit above anything the slots hold, so that only an oversize commit meets it.
  MountedFs m(TestConfig("reservation_lease = 3600\nmax_retained_bytes = " + std::to_string(kRetainLimit)));
  auto t0 = Clock::now();
  ModelTester tester(seed, m);
  bool ok = tester.Run(ops);
  std::string summary;
  for (auto& [op, c] : tester.counts) summary += " " + op + "=" + std::to_string(c);
  std::printf("model: ops=%d%s divergences=%d in %.1fs\n", tester.ops_run(), summary.c_str(),
              ok ? 0 : 1, SecondsSince(t0));
  CHECK(ok);
}

}  // namespace
}  // namespace gpucache
