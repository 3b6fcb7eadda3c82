// gpucache-bench: the data path through the mount, each case against the same work done
// directly on a directory of the same filesystem in the same run, and, where it applies,
// libfuse's stock passthrough_ll over the backing files. Every case runs kPasses passes; each
// pass starts with syncfs of the backing filesystem (and the mount), so no side pays for the
// other's dirty-page writeback, and the sides take turns going first.
//
//   gpucache-bench [--cases read,commit,stat,probe,restart] [--quick] [--restart-blocks N]
//                  [--permissions daemon|kernel] [--backing-io posix|uring] [--ram BYTES]
//                  [--ram-promote read|commit]
//   gpucache-bench --restart-data DIR [--restart-rounds N]
//   either form: [--eviction-policy NAME] ([limits] eviction_policy; default: the daemon's)
//
// --restart-data measures only restarts, of a daemon over DIR as it is (fill it once, fast, with
// `gpucache-index-bench --phase populate --data DIR --blocks 100000 [--crash]`): the first
// start (after a crash if the populate crashed: its journal replayed), then N rounds of a
// restart after a clean stop and one after SIGKILL, alternated; each from the daemon's start to
// the first stat of a block that answers. Prints min/median/max of each.
//
// One line per case:
//   case=NAME gpucache=V direct=V ratio=R unit=U [passthrough_ll=V] gpucache_spread=MIN/MED/MAX
//   direct_spread=MIN/MED/MAX ratio_spread=MIN/MAX
// V is the median of the passes; ratio is of the medians, gpucache/direct for throughputs
// (GB/s, ops/s) and direct/gpucache for latencies (us): above 1 means gpucache does better;
// ratio_spread is the lowest and highest ratio of one pass against the same pass's direct
// side. Commits are timed through the commit channel (`commit_`, adr/0022) and through the
// `.part` and rename protocol (`commit_rename_`), against the same passes' direct side. Reads are timed with 1 MiB read calls and with one call of the whole block. Needs root (mounts; cold cases drop the page cache).
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "clients/cpp/mount_client.h"
#include "store/eviction/eviction_policy.h"
#include "store/layout.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/sample_identity.h"
#include "tests/support/page_cache.h"

namespace gpucache::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(const std::function<void()>& work) {
  auto t = Clock::now();
  work();
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using test::DropCaches;
using test::Median;

constexpr int kPasses = 5;

// The [limits] line that picks `policy` (empty: none, the daemon's default).
std::string PolicyLine(const std::string& policy) {
  return policy.empty() ? "" : "\neviction_policy = \"" + policy + "\"";
}

// Writes back every dirty page of the filesystem holding `path` and waits for it.
void SyncFs(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::syncfs(fd);
  ::close(fd);
}

// Reads a file with read calls of `chunk` bytes.
uint64_t ReadWhole(const std::string& path, size_t chunk) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  thread_local std::vector<char> buf;
  if (buf.size() < chunk) buf.resize(chunk);
  uint64_t total = 0;
  ssize_t n;
  while ((n = ::read(fd, buf.data(), chunk)) > 0) total += static_cast<uint64_t>(n);
  ::close(fd);
  return total;
}

// Reads every file with `readers` threads, `chunk` bytes per read call; GB/s.
double ReadPass(const std::vector<std::string>& files, int readers, size_t chunk = 1 << 20) {
  std::atomic<uint64_t> bytes{0};
  double s = Seconds([&] {
    std::vector<std::thread> threads;
    for (int r = 0; r < readers; ++r) {
      threads.emplace_back([&, r] {
        for (size_t i = r; i < files.size(); i += readers) bytes += ReadWhole(files[i], chunk);
      });
    }
    for (auto& t : threads) t.join();
  });
  return double(bytes) / s / 1e9;
}

CacheIdentity Numbered(uint32_t n, size_t units = 16) {
  CacheIdentity id = test::SampleIdentity("acme", units);
  id.chain[0] = Bytes(16, 0);
  for (int i = 0; i < 4; ++i) id.chain[0][i] = static_cast<uint8_t>(n >> (8 * i));
  return id;
}

// libfuse's passthrough_ll example, built from Debian's libfuse3-dev, over `source`.
class Passthrough {
 public:
  Passthrough(const std::string& binary, const std::string& source, const std::string& mnt) : mnt_(mnt) {
    if (binary.empty() || !fs::exists(binary)) return;
    fs::create_directories(mnt);
    pid_ = ::fork();
    if (pid_ == 0) {
      int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 2);
      std::string opt = "source=" + source;
      ::execl(binary.c_str(), "passthrough_ll", "-o", opt.c_str(), mnt.c_str(), "-f", nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 500 && !Up(); ++i) ::usleep(10000);
  }
  ~Passthrough() {
    if (pid_ > 0) {
      (void)!std::system(("fusermount3 -u -z " + mnt_).c_str());  // already gone is fine
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool Up() const {
    struct statfs s;
    return pid_ > 0 && ::statfs(mnt_.c_str(), &s) == 0 && s.f_type == 0x65735546;
  }
  std::string Path(const std::string& rel) const { return mnt_ + "/" + rel; }

 private:
  std::string mnt_;
  pid_t pid_ = -1;
};

// The passes of one case: gpucache, direct and (if measured) passthrough_ll, pass by pass.
struct Line {
  std::string name;
  std::vector<double> gpucache, direct;
  std::string unit;
  bool latency = false;
  std::vector<double> passthrough;
  double Ratio(double g, double d) const { return latency ? d / g : g / d; }
  void Print() const {
    double ratio = Ratio(Median(gpucache), Median(direct));
    std::printf("case=%s gpucache=%.4g direct=%.4g ratio=%.3f unit=%s", name.c_str(), Median(gpucache),
                Median(direct), ratio, unit.c_str());
    if (!passthrough.empty()) std::printf(" passthrough_ll=%.4g", Median(passthrough));
    auto spread = [](const std::vector<double>& v) {
      auto [lo, hi] = std::minmax_element(v.begin(), v.end());
      char out[96];
      std::snprintf(out, sizeof out, "%.4g/%.4g/%.4g", *lo, Median(v), *hi);
      return std::string(out);
    };
    double lo = 1e300, hi = 0;
    for (size_t i = 0; i < gpucache.size() && i < direct.size(); ++i) {
      lo = std::min(lo, Ratio(gpucache[i], direct[i]));
      hi = std::max(hi, Ratio(gpucache[i], direct[i]));
    }
    std::printf(" gpucache_spread=%s direct_spread=%s ratio_spread=%.3f/%.3f\n", spread(gpucache).c_str(),
                spread(direct).c_str(), lo, hi);
    std::fflush(stdout);
  }
};

class Bench {
 public:
  // `ram`: the mount's [ram] table (empty: the daemon's default RAM tier).
  Bench(bool quick, std::string passthrough_bin, bool kernel_permissions, const std::string& policy, const std::string& backing_io,
        const std::string& ram)
      : quick_(quick), pt_bin_(std::move(passthrough_bin)),
        m_("backing_io = \"" + backing_io + "\"\n" + ram + (kernel_permissions
               ? test::TestConfig("max_block_bytes = 134217728" + PolicyLine(policy), "gids = [3000]") + "permissions = \"kernel\"\n"
               : test::TestConfig("max_block_bytes = 134217728" + PolicyLine(policy)))),
        client_(m_.mnt()),
        direct_(m_.scratch() + "/direct") {
    fs::create_directories(direct_);
  }

  void Reads() {
    std::vector<uint64_t> sizes = quick_ ? std::vector<uint64_t>{4} : std::vector<uint64_t>{1, 4, 16, 64};
    for (uint64_t mib : sizes) {
      uint64_t total = quick_ ? 64 : 256;
      uint32_t count = static_cast<uint32_t>(std::max<uint64_t>(4, total / mib));
      std::vector<std::string> mounted, backing;
      for (uint32_t i = 0; i < count; ++i) {
        CacheIdentity id = Numbered(next_++);
        if (client_.Commit(id, test::Payload(mib << 20, static_cast<uint8_t>(i))) != 0) return;
        mounted.push_back(client_.PathOf(id));
        backing.push_back(m_.data() + "/blocks/" + AddressOf(id).RelativePath());
      }
      Passthrough pt(pt_bin_, m_.data() + "/blocks", m_.scratch() + "/pt");
      std::vector<std::string> via_pt;
      for (uint32_t i = 0; i < count; ++i) {
        via_pt.push_back(pt.Path(backing[i].substr(m_.data().size() + 8)));
      }
      // 1 MiB read calls (what readahead-sized readers do) and one call for the whole block.
      std::vector<uint64_t> calls = {1};
      if (mib > 1) calls.push_back(mib);
      for (int readers : {1, 4}) {
        for (bool cold : {false, true}) {
          for (uint64_t call_mib : calls) {
            size_t chunk = call_mib << 20;
            std::vector<std::function<double()>> sides = {[&] { return ReadPass(mounted, readers, chunk); },
                                                          [&] { return ReadPass(backing, readers, chunk); }};
            if (pt.Up()) sides.push_back([&] { return ReadPass(via_pt, readers, chunk); });
            if (!cold) {  // warm: every file read once before measuring
              for (auto& side : sides) side();
            }
            WaitForRamTier();
            std::vector<std::vector<double>> r = Passes(sides, cold);
            if (r.empty()) return;
            Line l{"read_" + std::to_string(mib) + "MiB_" + (cold ? "cold" : "warm") + "_" +
                       std::to_string(readers) + "readers_" + (call_mib == mib ? "whole" : "1MiB") + "calls",
                   r[0], r[1], "GB/s"};
            if (r.size() > 2) l.passthrough = r[2];
            l.Print();
          }
        }
      }
    }
  }

  // With the RAM tier on, the blocks just read are copied in the background once their readers
  // closed (adr/0020): measure once that is done, so the passes see what a later reader sees.
  void WaitForRamTier() const {
    for (int i = 0; i < 3000; ++i) {
      std::ifstream in(m_.mnt() + "/.gpucache/metrics");
      bool idle = false, released = false;
      for (std::string line; std::getline(in, line);) {
        idle |= line == "gpucache_ram_promotions_pending 0";
        released |= line == "gpucache_ram_open_handles{served_by=\"daemon\"} 0";
      }
      if (idle && released) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // What the RAM tier did, as a comment line.
  void PrintRamTier() const {
    std::ifstream in(m_.mnt() + "/.gpucache/metrics");
    std::printf("# ram tier:");
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("gpucache_ram_") && !line.starts_with("# ")) std::printf(" %s", line.c_str() + 13);
    }
    std::printf("\n");
  }

  // kPasses passes of every side (each returns its measurement of one pass), by side. Pass p
  // starts with side p mod n, so no side always follows the same one; before each side the
  // backing filesystem is synced (and, for cold passes, the page cache dropped). Empty if
  // the page cache cannot be dropped.
  std::vector<std::vector<double>> Passes(const std::vector<std::function<double()>>& sides, bool cold) {
    std::vector<std::vector<double>> out(sides.size());
    for (int pass = 0; pass < kPasses; ++pass) {
      for (size_t k = 0; k < sides.size(); ++k) {
        size_t side = (pass + k) % sides.size();
        SyncFs(m_.data());
        SyncFs(direct_);
        if (cold && !DropCaches()) return {};
        out[side].push_back(sides[side]());
      }
    }
    return out;
  }

  void Commits() {
    for (uint64_t kib : {64, 1024, 4096}) {
      Bytes payload = test::Payload(kib << 10);
      int per_pass = static_cast<int>(std::clamp<uint64_t>((quick_ ? 16 : 64) * 1024 / kib, 16, 400));
      for (int writers : {1, 4}) {
        auto mounted = [&] {
          uint32_t base = next_;
          next_ += per_pass;
          return per_pass / Seconds([&] {
            Parallel(writers, per_pass, [&](int i) { client_.Commit(Numbered(base + i), payload); });
          });
        };
        auto renamed = [&] {
          uint32_t base = next_;
          next_ += per_pass;
          return per_pass / Seconds([&] {
            Parallel(writers, per_pass, [&](int i) { client_.CommitByRename(Numbered(base + i), payload); });
          });
        };
        auto direct = [&] {
          uint32_t base = next_;
          next_ += per_pass;
          return per_pass / Seconds([&] {
            Parallel(writers, per_pass, [&](int i) { DirectCommit(base + i, payload); });
          });
        };
        std::vector<std::vector<double>> r = Passes({mounted, renamed, direct}, false);
        const std::string shape = std::to_string(kib) + "KiB_" + std::to_string(writers) + "writers";
        Line{"commit_" + shape, r[0], r[2], "ops/s"}.Print();
        Line{"commit_rename_" + shape, r[1], r[2], "ops/s"}.Print();
      }
      ProfileOneWriter(kib, payload, false);
      ProfileOneWriter(kib, payload, true);
    }
  }

  // Where a commit's time goes: the FUSE requests one commit sends, and how long the daemon
  // spent in each (from its own latency histograms), printed as a comment line.
  void ProfileOneWriter(uint64_t kib, const Bytes& payload, bool by_rename) {
    constexpr int kCommits = 50;
    std::map<std::string, std::pair<double, double>> before = OpTotals();
    for (int i = 0; i < kCommits; ++i) {
      if (by_rename) client_.CommitByRename(Numbered(next_++), payload);
      else client_.Commit(Numbered(next_++), payload);
    }
    std::map<std::string, std::pair<double, double>> after = OpTotals();
    std::printf("# commit%s_%lluKiB per commit, requests (daemon us):", by_rename ? "_rename" : "",
                static_cast<unsigned long long>(kib));
    double total_us = 0;
    for (const auto& [op, a] : after) {
      double n = a.first - before[op].first, secs = a.second - before[op].second;
      if (n <= 0) continue;
      std::printf(" %s=%.2g (%.0f)", op.c_str(), n / kCommits, 1e6 * secs / n);
      total_us += 1e6 * secs / kCommits;
    }
    std::printf(" daemon_total_us=%.0f\n", total_us);
  }

  // op -> (count, seconds) from the daemon's gpucache_fuse_op_seconds histogram.
  std::map<std::string, std::pair<double, double>> OpTotals() const {
    std::map<std::string, std::pair<double, double>> out;
    std::ifstream in(m_.mnt() + "/.gpucache/metrics");
    for (std::string line; std::getline(in, line);) {
      for (auto [suffix, is_count] : {std::pair{"_count{op=\"", true}, std::pair{"_sum{op=\"", false}}) {
        std::string prefix = std::string("gpucache_fuse_op_seconds") + suffix;
        if (!line.starts_with(prefix)) continue;
        size_t end = line.find('"', prefix.size());
        std::string op = line.substr(prefix.size(), end - prefix.size());
        double v = std::stod(line.substr(line.rfind(' ') + 1));
        (is_count ? out[op].first : out[op].second) = v;
      }
    }
    return out;
  }

  void Stats() {
    CacheIdentity id = Numbered(next_++);
    client_.Commit(id, test::Payload(4096));
    CacheIdentity missing = Numbered(next_++);
    std::string hit = client_.PathOf(id), miss = client_.PathOf(missing);
    // The baseline is the same names in the backing directory itself: the block's own file,
    // and a missing name beside it (the same depth of path walk).
    std::string dhit = Backing(id), dmiss = Backing(missing);
    struct stat st;
    for (auto [name, g, d] : {std::tuple{"stat_hit", hit, dhit}, std::tuple{"stat_miss", miss, dmiss}}) {
      auto rate = [&](const std::string& p, int n) {
        return n / Seconds([&] {
          for (int i = 0; i < n; ++i) ::stat(p.c_str(), &st);
        });
      };
      double first_g = 1e6 / rate(g, 1), first_d = 1e6 / rate(d, 1);
      Line{std::string(name) + "_first", {first_g}, {first_d}, "us", true}.Print();
      int n = quick_ ? 20000 : 200000;
      std::vector<std::vector<double>> r = Passes({[&] { return rate(g, n); }, [&] { return rate(d, n); }}, false);
      Line{std::string(name) + "_warm", r[0], r[1], "ops/s"}.Print();
    }
  }

  void Probe() {
    // A 64-block chain: each block continues the previous one; the probe stats them in order.
    std::vector<std::string> mounted, direct;
    for (int i = 0; i < 64; ++i) {
      CacheIdentity id = Numbered(next_++);
      client_.Commit(id, test::Payload(4096));
      mounted.push_back(client_.PathOf(id));
      direct.push_back(Backing(id));
    }
    struct stat st;
    auto probe = [&](const std::vector<std::string>& paths) {
      int n = 0;
      for (const auto& p : paths) n += ::stat(p.c_str(), &st) == 0;
      return n;
    };
    probe(mounted);
    probe(direct);
    auto timed = [&](const std::vector<std::string>& paths) {
      return 1e6 * Seconds([&] { for (int i = 0; i < 100; ++i) probe(paths); }) / 100;
    };
    std::vector<std::vector<double>> r = Passes({[&] { return timed(mounted); }, [&] { return timed(direct); }}, false);
    Line{"prefix_probe_64", r[0], r[1], "us", true}.Print();
  }

  void Restart(uint32_t blocks) {
    std::printf("# restart: committing %u blocks of 4 KiB...\n", blocks);
    std::fflush(stdout);
    CacheIdentity last;
    Bytes payload = test::Payload(4096);
    for (uint32_t i = 0; i < blocks; ++i) {
      last = Numbered(next_++);
      client_.Commit(last, payload);
    }
    m_.Stop();
    std::string path = client_.PathOf(last);
    struct stat st;
    double s = Seconds([&] {
      m_.Start();
      while (::stat(path.c_str(), &st) != 0) ::usleep(1000);
    });
    uint64_t rss_kib = 0;
    std::ifstream status("/proc/" + std::to_string(m_.pid()) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmRSS:", 0) == 0) rss_kib = std::stoull(line.substr(6));
    }
    std::printf("case=restart_%u gpucache=%.3f direct=NA ratio=NA unit=s\n", blocks, s);
    // After a crash there is no index snapshot: every block header is read and checked.
    m_.Kill();
    double crash = Seconds([&] {
      m_.Start();
      while (::stat(path.c_str(), &st) != 0) ::usleep(1000);
    });
    std::printf("case=restart_after_crash_%u gpucache=%.3f direct=NA ratio=NA unit=s\n", blocks, crash);
    std::printf("case=resident_memory_per_block gpucache=%.0f direct=NA ratio=NA unit=bytes\n",
                double(rss_kib) * 1024 / blocks);
  }

 private:
  static void Parallel(int threads, int n, const std::function<void(int)>& f) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        for (int i = t; i < n; i += threads) f(i);
      });
    }
    for (auto& t : ts) t.join();
  }

  void DirectCommit(uint32_t n, const Bytes& payload) {
    std::string final_path = direct_ + "/" + std::to_string(n), tmp = final_path + ".tmp";
    int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return;
    // A short write would make the baseline cheaper than the work it stands for: say so.
    if (::write(fd, payload.data(), payload.size()) != static_cast<ssize_t>(payload.size())) {
      std::fprintf(stderr, "direct commit %u: short write\n", n);
    }
    ::close(fd);
    ::rename(tmp.c_str(), final_path.c_str());
  }

  bool quick_;
  std::string pt_bin_;
  test::MountedFs m_;
  MountClient client_;
  // A block's file in the (single) data directory.
  std::string Backing(const CacheIdentity& id) const {
    return m_.data() + "/blocks/" + AddressOf(id).RelativePath();
  }

  std::string direct_;
  uint32_t next_ = 1;
};

// A relative path "tenant/ns/block" of a block file under `data`, in tenant `tenant`.
std::string SomeBlock(const std::string& data, const std::string& tenant) {
  std::string last;
  for (const auto& ns : fs::directory_iterator(data + "/blocks/" + tenant)) {
    for (const auto& block : fs::directory_iterator(ns.path())) {
      last = tenant + "/" + ns.path().filename().string() + "/" + block.path().filename().string();
    }
    if (!last.empty()) break;
  }
  return last;
}

// The restart-only mode (--restart-data): see the comment at the top.
int RestartOnly(const std::string& data, int rounds, bool kernel_permissions, const std::string& policy) {
  std::string block = SomeBlock(data, "acme");
  if (block.empty()) {
    std::fprintf(stderr, "no block under %s/blocks/acme\n", data.c_str());
    return 1;
  }
  std::string config = "data_dirs = [\"" + data + "\"]\n" +
                       (kernel_permissions ? test::TestConfig(PolicyLine(policy), "gids = [3000]") + "permissions = \"kernel\"\n"
                                           : test::TestConfig(PolicyLine(policy)));
  struct stat st;
  auto t0 = Clock::now();
  test::MountedFs m(config);  // the first start: after a crash if the populate crashed
  std::string path = m.mnt() + "/" + block;
  while (::stat(path.c_str(), &st) != 0) ::usleep(1000);
  std::printf("case=restart_first gpucache=%.3f unit=s\n",
              std::chrono::duration<double>(Clock::now() - t0).count());
  auto start = [&] {
    return Seconds([&] {
      m.Start();
      while (::stat(path.c_str(), &st) != 0) ::usleep(1000);
    });
  };
  std::vector<double> clean, crash;
  for (int i = 0; i < rounds; ++i) {
    m.Stop();
    clean.push_back(start());
    m.Kill();
    crash.push_back(start());
  }
  auto line = [&](const char* name, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::printf("case=%s gpucache=%.3f unit=s gpucache_spread=%.3f/%.3f/%.3f\n", name, Median(v), v.front(),
                Median(v), v.back());
  };
  line("restart_clean", clean);
  line("restart_after_sigkill", crash);
  return 0;
}

}  // namespace
}  // namespace gpucache::bench

int main(int argc, char** argv) {
  CLI::App app{"gpucache-bench: the data path through the mount against direct access"};
  std::string cases = "read,commit,stat,probe,restart";
  bool quick = false;
  uint32_t restart_blocks = 100000;
  std::string passthrough = (std::filesystem::path(argv[0]).parent_path() / "passthrough_ll").string();
  app.add_option("--cases", cases, "comma-separated: read, commit, stat, probe, restart");
  app.add_flag("--quick", quick, "fewer sizes and repetitions");
  app.add_option("--restart-blocks", restart_blocks, "blocks committed before the restart case");
  app.add_option("--passthrough", passthrough, "libfuse's passthrough_ll binary (empty: skip)");
  std::string permissions = "daemon";
  app.add_option("--permissions", permissions, "fuse.permissions of the mount: daemon or kernel (adr/0009)")
      ->check(CLI::IsMember({"daemon", "kernel"}));
  std::string backing_io = "posix";
  app.add_option("--backing-io", backing_io, "backing_io of the mount: posix or uring (adr/0010)")
      ->check(CLI::IsMember({"posix", "uring"}));
  int64_t ram = -1;
  app.add_option("--ram", ram, "[ram] bytes of the mount (adr/0020): 0 turns the RAM tier off; "
                               "default: the daemon's (1/16 of memory)");
  std::string ram_promote = "read";
  app.add_option("--ram-promote", ram_promote, "[ram] promote of the mount (adr/0020): read or commit")
      ->check(CLI::IsMember({"read", "commit"}));
  std::string restart_data;
  int restart_rounds = 5;
  app.add_option("--restart-data", restart_data,
                 "measure only restarts of a daemon over this data directory (see the top of the source)");
  app.add_option("--restart-rounds", restart_rounds, "with --restart-data: rounds of each kind")
      ->check(CLI::PositiveNumber);
  std::string policy;
  app.add_option("--eviction-policy", policy, "[limits] eviction_policy of the mount (default: the daemon's)")
      ->check(CLI::IsMember(gpucache::PolicyNames()));
  CLI11_PARSE(app, argc, argv);
  if (::geteuid() != 0) {
    std::fprintf(stderr, "gpucache-bench: run as root (it mounts and drops the page cache)\n");
    return 2;
  }
  std::printf("# fuse.permissions=%s backing_io=%s ram=%s ram.promote=%s eviction_policy=%s\n", permissions.c_str(),
              backing_io.c_str(), ram < 0 ? "default" : std::to_string(ram).c_str(), ram_promote.c_str(),
              policy.empty() ? "default" : policy.c_str());
  if (!restart_data.empty()) {
    return gpucache::bench::RestartOnly(restart_data, restart_rounds, permissions == "kernel", policy);
  }
  gpucache::bench::Bench b(quick, passthrough, permissions == "kernel", policy, backing_io,
                           "[ram]\n" + (ram < 0 ? "" : "bytes = " + std::to_string(ram) + "\n") +
                               "promote = \"" + ram_promote + "\"\n");
  auto want = [&](const char* c) { return ("," + cases + ",").find(std::string(",") + c + ",") != std::string::npos; };
  if (want("read")) {
    b.Reads();
    b.PrintRamTier();
  }
  if (want("commit")) b.Commits();
  if (want("stat")) b.Stats();
  if (want("probe")) b.Probe();
  if (want("restart")) b.Restart(restart_blocks);
  return 0;
}
