// gpucache-commit-bench: the FileStore commit path in process (no FUSE), two ways in one run:
//   lifted:   spare files (SparePool) and checksums fed as the payload arrives;
//   baseline: no spare pool (an Env other than the POSIX one turns it off) and a payload that
//             forces the full read-back at seal (written whole, then its first 4 KiB again).
// Rounds alternate the two; prints the median time of Reserve (the CREATE's store work) and of
// Commit (the RENAME's seal) per block size, and the bytes read back.
//
//   gpucache-commit-bench [--dir /var/tmp/gpucache-commit-bench] [--blocks 300] [--rounds 5]
#include <CLI/CLI.hpp>
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "store/env.h"
#include "store/file_store.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The POSIX calls under another Env: FileMedium runs no spare pool over it.
class PlainEnv final : public EnvWrapper {};

struct Store {
  std::unique_ptr<IndexedStore> store;
  FileMedium* medium = nullptr;
};

Store Open(const std::string& dir, Env* env) {
  fs::remove_all(dir);
  StoreOptions options;
  options.env = env;
  std::string error;
  Store s{OpenFileStore(dir, options, nullptr, &error)};
  if (!s.store) throw std::runtime_error(error);
  s.medium = &static_cast<FileMedium&>(s.store->medium());
  return s;
}

CacheIdentity Key(uint32_t n) {
  CacheIdentity id = test::SampleIdentity("acme");
  for (int i = 0; i < 4; ++i) id.chain[1][i] = static_cast<uint8_t>(n >> (8 * i));
  return id;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Commits `blocks` blocks of `payload`; appends the time of each Reserve and Commit.
void Round(Store& s, bool lifted, const Bytes& payload, uint32_t& next, int blocks,
           std::vector<double>& reserve_us, std::vector<double>& commit_us) {
  for (int i = 0; i < blocks; ++i) {
    CacheIdentity id = Key(next++);
    BlockAddress a = AddressOf(id);
    s.store->CreateNamespace(a.tenant, a.ns, Owner{0, 0});
    auto t0 = Clock::now();
    auto r = s.store->Reserve(a, Owner{0, 0});
    auto t1 = Clock::now();
    if (!r.ok()) throw std::runtime_error("reserve failed");
    s.store->SetIdentity(r.value(), EncodePhysicalKey(id));
    s.store->Write(r.value(), 0, payload);
    if (!lifted) s.store->Write(r.value(), 0, std::span(payload).first(4096));  // forces the read-back
    auto t2 = Clock::now();
    if (s.store->Commit(r.value()) != StatusCode::kOk) throw std::runtime_error("commit failed");
    auto t3 = Clock::now();
    reserve_us.push_back(Us(t0, t1));
    commit_us.push_back(Us(t2, t3));
  }
}

}  // namespace
}  // namespace gpucache

int main(int argc, char** argv) {
  using namespace gpucache;
  CLI::App app{"gpucache-commit-bench: FileStore's CREATE and commit work, lifted against baseline"};
  std::string dir = "/var/tmp/gpucache-commit-bench";
  int blocks = 300, rounds = 5;
  app.add_option("--dir", dir, "scratch directory (removed and recreated)");
  app.add_option("--blocks", blocks, "blocks per round and size");
  app.add_option("--rounds", rounds, "rounds of each variant, alternated");
  CLI11_PARSE(app, argc, argv);
  PlainEnv plain;
  Store lifted = Open(dir + "/lifted", nullptr), base = Open(dir + "/baseline", &plain);
  uint32_t next = 1;
  for (uint64_t kib : {64, 1024, 4096}) {
    Bytes payload(kib << 10);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 131 + kib);
    std::vector<double> lr, lc, br, bc;
    int n = std::max(20, blocks * 64 / static_cast<int>(std::max<uint64_t>(kib, 64)));
    uint64_t lifted_read = lifted.medium->IoStats().read_back_bytes, base_read = base.medium->IoStats().read_back_bytes;
    for (int round = 0; round < rounds; ++round) {
      if (round % 2 == 0) {
        Round(lifted, true, payload, next, n, lr, lc);
        Round(base, false, payload, next, n, br, bc);
      } else {
        Round(base, false, payload, next, n, br, bc);
        Round(lifted, true, payload, next, n, lr, lc);
      }
    }
    std::printf("size=%lluKiB blocks=%d reserve_us lifted=%.1f baseline=%.1f commit_us lifted=%.1f baseline=%.1f "
                "read_back_MiB lifted=%.1f baseline=%.1f\n",
                static_cast<unsigned long long>(kib), n * rounds, Median(lr), Median(br), Median(lc), Median(bc),
                (lifted.medium->IoStats().read_back_bytes - lifted_read) / 1048576.0,
                (base.medium->IoStats().read_back_bytes - base_read) / 1048576.0);
    std::fflush(stdout);
  }
  lifted.store.reset();
  base.store.reset();
  fs::remove_all(dir);
  return 0;
}
