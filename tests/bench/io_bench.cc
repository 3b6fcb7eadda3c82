// gpucache-io-bench: block payload reads through FileStore's FileSource path (PreadFull,
// buffered) against UringSource (io_uring, registered buffers, O_DIRECT where allowed), cold
// (page cache dropped before every pass) and warm, A/B alternated, median of the rounds; and
// the per-chunk checksum cost on one core.
//
//   gpucache-io-bench [--dir /var/tmp/gpucache-io-bench] [--files 64] [--size-mib 4]
//                     [--read-kib 0 (whole payload)] [--rounds 3] [--threads 1]
//
// One line per case:
//   case=NAME gpucache=V direct=V ratio=R unit=GB/s
// gpucache is UringSource (the variant in the case name), direct is PreadFull on a buffered
// descriptor (what FileStore does today); ratio = gpucache/direct, above 1 means io_uring wins.
// Needs root for the cold cases (drop_caches); on tmpfs "cold" is the same as warm.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "store/block_file.h"
#include "store/checksum.h"
#include "store/io/uring_reader.h"
#include "store/io/uring_source.h"
#include "store/posix_io.h"
#include "tests/support/page_cache.h"

namespace gpucache::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string dir = "/var/tmp/gpucache-io-bench";
  size_t files = 64;
  size_t size_mib = 4;
  size_t read_kib = 0;
  size_t rounds = 3;
  size_t threads = 1;
  size_t slot_kib = 1024;
};

using test::DropCaches;
using test::Median;

uint8_t PatternByte(size_t file, size_t i) { return static_cast<uint8_t>(i * 131 + file * 7 + (i >> 12)); }

std::string FilePath(const Config& c, size_t i) { return c.dir + "/block-" + std::to_string(i); }

// Block-like files: kBlockDataOffset bytes of (zero) header room, then the payload.
void WriteFiles(const Config& c) {
  fs::create_directories(c.dir);
  size_t n = c.size_mib << 20;
  std::vector<uint8_t> payload(n);
  for (size_t f = 0; f < c.files; ++f) {
    for (size_t i = 0; i < n; ++i) payload[i] = PatternByte(f, i);
    Fd fd(::open(FilePath(c, f).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() || PwriteFull(fd.get(), payload, kBlockDataOffset) != StatusCode::kOk) {
      std::fprintf(stderr, "io-bench: cannot write %s\n", FilePath(c, f).c_str());
      std::exit(1);
    }
  }
  ::sync();
}

// One pass over every file with `read`: (fd, offset in payload, out) -> status. Returns GB/s.
using ReadFn = std::function<StatusCode(Fd&, uint64_t, std::span<uint8_t>)>;
using OpenFn = std::function<ReadFn(Fd)>;

double Pass(const Config& c, const OpenFn& open, bool aligned_buffer) {
  size_t n = c.size_mib << 20;
  size_t piece = c.read_kib ? c.read_kib << 10 : n;
  std::atomic<bool> failed{false};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (size_t t = 0; t < c.threads; ++t) {
    threads.emplace_back([&, t] {
      // VerifyingReader reads into a std::vector (not 4096-aligned); into-out needs alignment.
      std::vector<uint8_t> vec(aligned_buffer ? 0 : piece + 16);
      uint8_t* aligned = aligned_buffer ? static_cast<uint8_t*>(std::aligned_alloc(4096, piece)) : nullptr;
      uint8_t* buf = aligned ? aligned : vec.data() + 16;
      for (size_t f = t; f < c.files; f += c.threads) {
        Fd fd(::open(FilePath(c, f).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        ReadFn read = open(std::move(fd));
        for (size_t off = 0; off < n; off += piece) {
          std::span<uint8_t> out(buf, std::min(piece, n - off));
          Fd unused;
          if (read(unused, off, out) != StatusCode::kOk || out[0] != PatternByte(f, off) ||
              out.back() != PatternByte(f, off + out.size() - 1)) {
            failed = true;
          }
        }
      }
      std::free(aligned);
    });
  }
  for (auto& th : threads) th.join();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed) {
    std::fprintf(stderr, "io-bench: a read failed or returned wrong bytes\n");
    std::exit(1);
  }
  return double(c.files) * double(n) / s / 1e9;
}

OpenFn PreadOpen() {
  return [](Fd fd) -> ReadFn {
    auto shared = std::make_shared<Fd>(std::move(fd));
    return [shared](Fd&, uint64_t off, std::span<uint8_t> out) {
      return PreadFull(shared->get(), out, kBlockDataOffset + off);  // FileSource::ReadRaw
    };
  };
}

// The reader on the file as UringSource sets it up, minus its tmpfs rule (which would make the
// /dev/shm cases pread against pread): here tmpfs, which takes O_DIRECT since Linux 6.6, is read
// through io_uring too, so its cost is measured.
OpenFn UringOpen(UringReader& reader) {
  return [&reader](Fd fd) -> ReadFn {
    auto shared = std::make_shared<std::pair<Fd, Fd>>(std::move(fd), Fd());
    if (reader.use_direct()) shared->second = OpenDirect(shared->first.get());
    return [&reader, shared](Fd&, uint64_t off, std::span<uint8_t> out) {
      return reader.Read({shared->first.get(), shared->second.get()}, kBlockDataOffset + off, out);
    };
  };
}

// The production path: UringSource (pread on tmpfs).
OpenFn SourceOpen(UringReader& reader) {
  return [&reader](Fd fd) -> ReadFn {
    auto src = std::make_shared<UringSource>(reader, std::move(fd), kBlockDataOffset);
    return [src](Fd&, uint64_t off, std::span<uint8_t> out) { return src->ReadRaw(off, out); };
  };
}

void Report(const std::string& name, double gpucache, double direct) {
  std::printf("case=%s gpucache=%.3f direct=%.3f ratio=%.3f unit=GB/s\n", name.c_str(), gpucache,
              direct, gpucache / direct);
  std::fflush(stdout);
}

// A/B alternated `rounds` times; cold drops the page cache before every pass.
void Compare(const Config& c, const std::string& name, const OpenFn& b, bool b_aligned, bool cold) {
  std::vector<double> va, vb;
  if (!cold) Pass(c, PreadOpen(), false);  // warm the page cache once
  for (size_t r = 0; r < c.rounds; ++r) {
    if (cold) DropCaches();
    va.push_back(Pass(c, PreadOpen(), false));
    if (cold) DropCaches();
    vb.push_back(Pass(c, b, b_aligned));
    std::fprintf(stderr, "  %s round %zu: pread %.3f uring %.3f GB/s\n", name.c_str(), r, va.back(),
                 vb.back());
  }
  Report(name, Median(vb), Median(va));
}

void ChecksumCost() {
  std::vector<uint8_t> buf(64u << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::vector<double> v;
  uint64_t sink = 0;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (size_t c = 0; c < buf.size() / kDefaultChunkSize; ++c) {
      sink ^= ChunkChecksum({buf.data() + c * kDefaultChunkSize, kDefaultChunkSize}, c);
    }
    v.push_back(double(buf.size()) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  std::vector<double> m;
  std::vector<uint8_t> dst(1u << 20);
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (size_t off = 0; off < buf.size(); off += dst.size()) {
      std::memcpy(dst.data(), buf.data() + off, dst.size());
      sink ^= dst[r];
    }
    m.push_back(double(buf.size()) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  std::printf("case=chunk_checksum_64KiB_one_core gpucache=%.3f direct=NA ratio=NA unit=GB/s\n", Median(v));
  std::printf("case=memcpy_1MiB_one_core gpucache=%.3f direct=NA ratio=NA unit=GB/s\n", Median(m));
  std::fprintf(stderr, "  (sink %llx)\n", static_cast<unsigned long long>(sink));
}

int Main(int argc, char** argv) {
  Config c;
  CLI::App app{"gpucache-io-bench: PreadFull against UringSource on block-like files"};
  app.add_option("--dir", c.dir, "scratch directory (created; its files are removed at the end)");
  app.add_option("--files", c.files, "block files");
  app.add_option("--size-mib", c.size_mib, "payload MiB per file");
  app.add_option("--read-kib", c.read_kib, "read size in KiB (0: the whole payload at once)");
  app.add_option("--rounds", c.rounds, "A/B rounds (median reported)");
  app.add_option("--threads", c.threads, "reader threads");
  app.add_option("--slot-kib", c.slot_kib, "registered buffer (and io_uring read) size in KiB");
  CLI11_PARSE(app, argc, argv);

  WriteFiles(c);
  UringReaderOptions o;
  o.probe_dir = c.dir;
  o.page_cache_first = false;
  o.slot_bytes = c.slot_kib << 10;
  o.slots = std::max<size_t>(32, 4 * c.threads * ((c.size_mib << 10) / c.slot_kib));
  o.rings = std::max<size_t>(4, c.threads);
  auto reader = UringReader::Create(o);
  UringReaderOptions ob = o;
  ob.use_direct = false;
  auto buffered = UringReader::Create(ob);
  UringReaderOptions oi = o;
  oi.direct_into_out = true;
  auto into = UringReader::Create(oi);
  UringReaderOptions oc = o;
  oc.page_cache_first = true;
  auto cache_first = UringReader::Create(oc);
  if (!reader || !buffered || !into || !cache_first) return 1;
  {
    Fd probe(::open(FilePath(c, 0).c_str(), O_RDONLY | O_CLOEXEC));
    std::fprintf(stderr, "io-bench: %s; %s: O_DIRECT %s; %zu files x %zu MiB, read %zu KiB, %zu threads\n",
                 reader->stats().status.c_str(), c.dir.c_str(),
                 OpenDirect(probe.get()).valid() ? "yes" : "no", c.files, c.size_mib,
                 c.read_kib ? c.read_kib : c.size_mib << 10, c.threads);
  }
  Compare(c, "cold_uring_direct", UringOpen(*reader), false, true);
  Compare(c, "warm_uring_direct", UringOpen(*reader), false, false);
  Compare(c, "cold_uring_direct_into_out", UringOpen(*into), true, true);
  Compare(c, "warm_uring_buffered", UringOpen(*buffered), false, false);
  Compare(c, "cold_uring_direct_page_cache_first", UringOpen(*cache_first), false, true);
  Compare(c, "warm_uring_direct_page_cache_first", UringOpen(*cache_first), false, false);
  Compare(c, "cold_uring_source_default", SourceOpen(*cache_first), false, true);
  Compare(c, "warm_uring_source_default", SourceOpen(*cache_first), false, false);
  ChecksumCost();
  UringReaderStats s = reader->stats();
  std::fprintf(stderr, "io-bench: uring reads %llu, pread fallbacks %llu, timeouts %llu\n",
               static_cast<unsigned long long>(s.uring_reads),
               static_cast<unsigned long long>(s.pread_reads),
               static_cast<unsigned long long>(s.timeouts));
  std::error_code ec;
  for (size_t f = 0; f < c.files; ++f) fs::remove(FilePath(c, f), ec);
  fs::remove(c.dir, ec);
  return 0;
}

}  // namespace
}  // namespace gpucache::bench

int main(int argc, char** argv) { return gpucache::bench::Main(argc, argv); }
