// gpucache-index-bench: restart time and in-memory index size of a FileStore, in process (no
// FUSE, no root).
//
//   gpucache-index-bench [--blocks N] [--dir DIR] [--keep] [--no-scan] [--policy NAME]
//   gpucache-index-bench --phase populate|measure --data DIR [--blocks N]   (one phase, for
//   profiling: populate once, then measure as often as needed)
//
// Commits N blocks (4 KiB payloads, realistic identities: a few tenants and namespaces, chains
// of consecutive 256-token blocks as an engine writes them, the last block of a chain partial)
// into a scratch data directory under DIR, closes the store cleanly (the index snapshot is
// written), then, in a fresh process so that the populate phase's heap does not blur the
// numbers, measures:
//   restart_store_crash_N the first open after the populating process died without closing the
//                         store (SIGKILL-like): INDEX from its start, its journal replayed (s)
//   restart_store_crash_cpu_N  CPU time (user + system) of restart_store_crash_N (s)
//   restart_store_N       open from the snapshot until one block opens and reads (s)
//   restart_store_cpu_N   CPU time (user + system) of restart_store_N (s)
//   restart_store_scan_N  the same after removing INDEX: every header is read (s)
//   index_bytes_per_block heap in use (mallinfo2) after the open minus before, over N
//   index_rss_per_block   resident set after the open minus before, over N
//   list_every_namespace_N   ListEntries (readdir) of each of the five namespaces (ms)
//   visit_every_tenant_N  VisitBlocks (the cold pack's pass) of both tenants (ms)
//   stat_worst_during_listing_N  the slowest Stat of another thread while namespaces are
//                         listed: how long a listing holds the store's lock at a time (ms)
// One machine-readable line per case: `case=NAME gpucache=VALUE unit=UNIT`.
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <sys/resource.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <fstream>

#include "store/file_store.h"
#include "tests/support/sample_identity.h"

extern char** environ;

namespace gpucache::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr Owner kOwner{1000, 1000};
constexpr size_t kPayload = 4096;
constexpr uint32_t kChainBlocks = 32;  // blocks per sequence (an 8k-token prompt)
constexpr uint32_t kUnits = 16;        // hash units of 16 tokens per 256-token block

Bytes Digest16(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t in[3] = {a, b, c};
  XXH128_hash_t h = XXH3_128bits(in, sizeof(in));
  Bytes out(16);
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(h.high64 >> (56 - 8 * i));
    out[8 + i] = static_cast<uint8_t>(h.low64 >> (56 - 8 * i));
  }
  return out;
}

// Block `i` of the whole run: sequence i / kChainBlocks, position i % kChainBlocks. The
// sequences rotate over five namespaces (two tenants, two models, two TP ranks).
CacheIdentity IdentityOf(uint64_t i) {
  uint64_t seq = i / kChainBlocks, pos = i % kChainBlocks;
  static const char* kTenants[] = {"acme", "acme", "acme", "beta", "beta"};
  uint64_t space = seq % 5;
  CacheIdentity id = test::SampleIdentity(kTenants[space], 0);
  if (space == 1 || space == 4) id.model_revision = "Qwen/Qwen2.5-7B-Instruct@a09a354";
  if (space == 2) id.tp_rank = 1;
  id.chain.clear();
  // chain[0] is the parent: the last unit hash of the previous block (zero for the first).
  id.chain.push_back(pos == 0 ? Bytes(16, 0) : Digest16(seq, pos - 1, kUnits));
  for (uint32_t u = 1; u <= kUnits; ++u) id.chain.push_back(Digest16(seq, pos, u));
  id.valid_length = 256;
  if (pos == kChainBlocks - 1) {  // the tail of the prompt: a partial block
    id.chain.resize(1 + kUnits / 2);
    id.valid_length = 130;
  }
  return id;
}

std::string g_policy = std::string(kDefaultPolicy);
bool g_background = true;  // --verify: "background" (the daemon's default) or "before_mount"

std::unique_ptr<IndexedStore> OpenStore(const std::string& dir, FileStoreReport* report) {
  std::string error;
  StoreOptions options;
  options.sync_commits = false;
  options.eviction_policy = g_policy;
  options.verify_in_background = g_background;
  auto store = OpenFileStore(dir, options, report, &error);
  if (!store) {
    std::fprintf(stderr, "cannot open %s: %s\n", dir.c_str(), error.c_str());
    std::exit(1);
  }
  return store;
}

// With `crash`, the process ends without closing the store (no snapshot is written at the end).
int Populate(const std::string& dir, uint64_t blocks, bool crash) {
  auto store = OpenStore(dir, nullptr);
  Bytes payload = test::Payload(kPayload);
  auto start = Clock::now();
  for (uint64_t i = 0; i < blocks; ++i) {
    CacheIdentity id = IdentityOf(i);
    BlockAddress a = AddressOf(id);
    if (i < 5 * kChainBlocks) store->CreateNamespace(a.tenant, a.ns, kOwner);
    auto r = store->Reserve(a, kOwner);
    payload[0] = static_cast<uint8_t>(i);
    if (!r.ok() || store->SetIdentity(r.value(), EncodePhysicalKey(id)) != StatusCode::kOk ||
        !store->Write(r.value(), 0, payload).ok() || store->Commit(r.value()) != StatusCode::kOk) {
      std::fprintf(stderr, "commit of block %llu failed\n", static_cast<unsigned long long>(i));
      return 1;
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, "populated %llu blocks in %.2f s\n", static_cast<unsigned long long>(blocks), s);
  if (crash) {
    std::fflush(nullptr);
    std::_Exit(0);
  }
  return 0;  // the destructor writes the snapshot
}

size_t HeapInUse() {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Opens the store and times it until the first hit: one block (the last committed) opens and
// a byte of it reads back verified.
// `walk`: the time until the background check of the block files finished as well (adr/0016;
// the same as the first hit's with --verify before_mount).
double RestartToFirstHit(const std::string& dir, uint64_t blocks, FileStoreReport& report,
                         std::unique_ptr<IndexedStore>& out, double* cpu = nullptr,
                         double* walk = nullptr) {
  auto start = Clock::now();
  double cpu0 = CpuSeconds();
  out = OpenStore(dir, &report);
  auto reader = out->Open(AddressOf(IdentityOf(blocks - 1)));
  uint8_t byte = 0;
  if (!reader.ok() || !reader.value()->Read(0, {&byte, 1}).ok()) {
    std::fprintf(stderr, "first hit failed after restart\n");
    std::exit(1);
  }
  if (cpu) *cpu = CpuSeconds() - cpu0;
  double t = std::chrono::duration<double>(Clock::now() - start).count();
  out->WaitForVerification();
  if (walk) *walk = std::chrono::duration<double>(Clock::now() - start).count();
  return t;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Listing: readdir of every namespace (ListEntries, a pass over the index each) against the
// cold pack's one pass per tenant (VisitBlocks); and the slowest Stat of another thread while
// listings run, which is how long a listing keeps the store's lock at a time.
void MeasureListing(IndexedStore& store, uint64_t blocks) {
  std::vector<BlockAddress> spaces;
  for (uint64_t seq = 0; seq < 5 && seq * kChainBlocks < blocks; ++seq) {
    spaces.push_back(AddressOf(IdentityOf(seq * kChainBlocks)));
  }
  auto start = Clock::now();
  size_t listed = 0;
  for (const BlockAddress& a : spaces) listed += store.ListEntries(a.tenant, a.ns).size();
  double list_s = Seconds(start);
  start = Clock::now();
  size_t visited = 0;
  for (std::string tenant : {"acme", "beta"}) {
    store.VisitBlocks(tenant, [&](const BlockAddress&) {
      ++visited;
      return true;
    });
  }
  double visit_s = Seconds(start);
  std::atomic<bool> done{false};
  double worst = 0;
  std::thread prober([&] {
    BlockAddress a = AddressOf(IdentityOf(blocks / 2));
    while (!done.load()) {
      auto t = Clock::now();
      if (!store.Stat(a).ok()) std::fprintf(stderr, "stat failed during the listing\n");
      worst = std::max(worst, Seconds(t));
    }
  });
  for (int round = 0; round < 3; ++round) {
    for (const BlockAddress& a : spaces) store.ListEntries(a.tenant, a.ns);
  }
  done = true;
  prober.join();
  std::fprintf(stderr, "listing: %zu names from %zu namespaces, %zu blocks visited\n", listed,
               spaces.size(), visited);
  std::printf("case=list_every_namespace_%llu gpucache=%.1f unit=ms\n",
              static_cast<unsigned long long>(blocks), list_s * 1e3);
  std::printf("case=visit_every_tenant_%llu gpucache=%.1f unit=ms\n",
              static_cast<unsigned long long>(blocks), visit_s * 1e3);
  std::printf("case=stat_worst_during_listing_%llu gpucache=%.2f unit=ms\n",
              static_cast<unsigned long long>(blocks), worst * 1e3);
}

int Measure(const std::string& dir, uint64_t blocks, bool scan, bool after_crash) {
  if (after_crash) {
    FileStoreReport report;
    std::unique_ptr<IndexedStore> store;
    double cpu = 0, walk = 0;
    double t = RestartToFirstHit(dir, blocks, report, store, &cpu, &walk);
    std::printf("case=restart_store_crash_%llu gpucache=%.3f unit=s\n",
                static_cast<unsigned long long>(blocks), t);
    std::printf("case=restart_store_crash_walk_%llu gpucache=%.3f unit=s\n",
                static_cast<unsigned long long>(blocks), walk);
    std::printf("case=restart_store_crash_cpu_%llu gpucache=%.3f unit=s\n",
                static_cast<unsigned long long>(blocks), cpu);
    std::fprintf(stderr, "after the crash: %llu of %llu blocks from INDEX and the journal\n",
                 static_cast<unsigned long long>(report.from_snapshot),
                 static_cast<unsigned long long>(blocks));
  }  // a clean close
  {
    FileStoreReport report;
    std::unique_ptr<IndexedStore> store;
    size_t heap0 = HeapInUse(), rss0 = ResidentBytes();
    double cpu = 0, walk = 0;
    double t = RestartToFirstHit(dir, blocks, report, store, &cpu, &walk);
    size_t heap1 = HeapInUse(), rss1 = ResidentBytes();
    if (report.from_snapshot != blocks) {
      std::fprintf(stderr, "warning: %llu of %llu blocks came from the snapshot\n",
                   static_cast<unsigned long long>(report.from_snapshot),
                   static_cast<unsigned long long>(blocks));
    }
    std::printf("case=restart_store_%llu gpucache=%.3f unit=s\n",
                static_cast<unsigned long long>(blocks), t);
    std::printf("case=restart_store_walk_%llu gpucache=%.3f unit=s\n",
                static_cast<unsigned long long>(blocks), walk);
    // CPU time (user + system) of the same: steadier than wall time on a shared machine.
    std::printf("case=restart_store_cpu_%llu gpucache=%.3f unit=s\n",
                static_cast<unsigned long long>(blocks), cpu);
    std::printf("case=index_bytes_per_block gpucache=%.0f unit=B\n",
                double(heap1 - heap0) / double(blocks));
    std::printf("case=index_rss_per_block gpucache=%.0f unit=B\n",
                double(rss1 > rss0 ? rss1 - rss0 : 0) / double(blocks));
    MeasureListing(*store, blocks);
    std::fflush(stdout);
  }  // a clean close: writes the snapshot again
  if (!scan) return 0;
  fs::remove(dir + "/" + kSnapshotFile);
  FileStoreReport report;
  std::unique_ptr<IndexedStore> store;
  double t = RestartToFirstHit(dir, blocks, report, store);
  if (report.blocks_loaded != blocks) {
    std::fprintf(stderr, "scan loaded %llu of %llu blocks\n",
                 static_cast<unsigned long long>(report.blocks_loaded),
                 static_cast<unsigned long long>(blocks));
    return 1;
  }
  std::printf("case=restart_store_scan_%llu gpucache=%.3f unit=s\n",
              static_cast<unsigned long long>(blocks), t);
  return 0;
}

// Runs this binary again for the measure phase: a fresh heap and resident set.
int RunChild(const std::string& phase, const std::string& dir, uint64_t blocks, bool scan) {
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string n = std::to_string(blocks);
  const char* argv[] = {self.c_str(), "--phase", phase.c_str(), "--data", dir.c_str(),
                        "--blocks", n.c_str(), "--policy", g_policy.c_str(), "--crash",
                        scan ? nullptr : "--no-scan", nullptr};
  pid_t pid;
  if (::posix_spawn(&pid, self.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ) != 0) {
    return 1;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace
}  // namespace gpucache::bench

int main(int argc, char** argv) {
  using namespace gpucache::bench;
  CLI::App app{"gpucache-index-bench: FileStore restart time and index bytes per block"};
  uint64_t blocks = 100000;
  std::string dir = "/var/tmp", data, phase = "all";
  bool keep = false, no_scan = false, crash = false;
  app.add_option("--blocks", blocks, "committed blocks")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "where to make the scratch data directory");
  app.add_option("--data", data, "use this data directory as is (populate: create it)");
  app.add_option("--phase", phase, "all, populate or measure")
      ->check(CLI::IsMember({"all", "populate", "measure"}));
  app.add_flag("--keep", keep, "keep the scratch data directory");
  app.add_flag("--no-scan", no_scan, "skip the restart without a snapshot");
  app.add_flag("--crash", crash, "populate: end without closing the store; measure: time that first");
  std::string verify = "background";
  app.add_option("--verify", verify, "when a start checks the block files (adr/0016)")
      ->check(CLI::IsMember({"background", "before_mount"}));
  app.add_option("--policy", g_policy, "eviction policy")->check(CLI::IsMember(gpucache::PolicyNames()));
  CLI11_PARSE(app, argc, argv);
  g_background = verify == "background";

  bool scratch = data.empty();
  if (scratch) {
    std::string tmpl = dir + "/gpucache-index-bench.XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      return 1;
    }
    data = tmpl;
  }
  int rc = 0;
  // "all": populate in a child that dies without closing the store, then measure the restart
  // after that crash, after a clean close, and without a snapshot, in another child.
  if (phase == "all") rc = RunChild("populate", data, blocks, !no_scan);
  if (rc == 0 && phase == "all") rc = RunChild("measure", data, blocks, !no_scan);
  if (phase == "populate") rc = Populate(data, blocks, crash);
  if (phase == "measure") rc = Measure(data, blocks, !no_scan, crash);
  if (scratch && !keep && phase == "all") fs::remove_all(data);
  if (keep) std::fprintf(stderr, "data directory kept: %s\n", data.c_str());
  return rc;
}
