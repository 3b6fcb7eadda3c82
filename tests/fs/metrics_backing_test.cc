// gpucache_backing_reads_total: each path's series is a counter of the reads done that way, as
// the reader that did them counted them, so that no scrape ever sees one go down.
#include <doctest/doctest.h>

#include <map>
#include <regex>
#include <sstream>

#include "fs/metrics.h"
#include "store/memory_store.h"

namespace gpucache {
namespace {

// The backing reads by path, from one scrape.
std::map<std::string, double> BackingReads(Metrics& metrics, MemoryStore& store) {
  static const std::regex sample(R"re(^gpucache_backing_reads_total\{path="(\w+)"\} (\S+)$)re");
  std::map<std::string, double> out;
  std::istringstream in(metrics.Render(store, MetricsViewer{[](const std::string&) { return true; }, true}));
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, sample)) out[m[1].str()] = std::stod(m[2].str());
  }
  return out;
}

}  // namespace

// Regression: the pread series was worked out as client reads minus io_uring's reads, and
// io_uring also reads for RAM-tier copies (and for reads whose bytes then fail their checksum):
// each such read took one off the pread series, a decrease Prometheus reads as a restart.
TEST_CASE("Metrics: backing reads by pread never go down when io_uring reads a RAM-tier copy") {
  MemoryStore store;
  Metrics metrics;
  MediumIoStats io;
  io.uring = UringReaderStats{};
  metrics.SetBackingIoStats([&io] { return io; });
  // Two client reads: one through io_uring, one by pread (no free slot at the time).
  metrics.RecordBlockRead("acme", 4096);
  metrics.RecordBlockRead("acme", 4096);
  io.uring->reads = 2;
  io.uring->uring_reads = 1;
  io.uring->pread_reads = 1;
  auto first = BackingReads(metrics, store);
  CHECK(first["io_uring"] == 1);
  CHECK(first["pread"] == 1);
  // The RAM tier copies the block through io_uring: no client read.
  io.uring->reads = 3;
  io.uring->uring_reads = 2;
  auto second = BackingReads(metrics, store);
  CHECK(second["io_uring"] == 2);
  CHECK(second["pread"] == 1);
  for (const char* path : {"io_uring", "page_cache", "pread"}) {
    CAPTURE(path);
    CHECK(second[path] >= first[path]);
  }
}

TEST_CASE("Metrics: with backing_io posix every backing read the medium counted is a pread") {
  MemoryStore store;
  Metrics metrics;
  MediumIoStats io;  // no io_uring reader
  io.pread_reads = 5;  // client reads and RAM-tier copies alike
  metrics.SetBackingIoStats([&io] { return io; });
  metrics.RecordBlockRead("acme", 4096);
  auto s = BackingReads(metrics, store);
  CHECK(s["pread"] == 5);
  CHECK(s["io_uring"] == 0);
  CHECK(s["page_cache"] == 0);
}

}  // namespace gpucache
