// The scrape-time series that come from outside the store's counters: the standard process_*
// metrics (from /proc/self, as the Prometheus client libraries export them), build info, the
// data directories, backing reads by the path that served them and the io_uring buffer pool.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "fs/metrics.h"
#include "store/indexed_store.h"
#include "store/io/uring_reader.h"

#ifndef GPUCACHE_VERSION
#define GPUCACHE_VERSION "unknown"
#endif

namespace gpucache {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// /proc/self/stat fields after the command (which may hold spaces): utime is field 14,
// stime 15, starttime 22, rss 24 (1-based over the whole line).
std::vector<std::string> StatFields() {
  std::string stat = ReadFile("/proc/self/stat");
  std::vector<std::string> fields;
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream f(stat.substr(close + 2));
  for (std::string x; f >> x;) fields.push_back(x);
  return fields;  // fields[0] is field 3 (state)
}

double BootTime() {
  std::istringstream in(ReadFile("/proc/stat"));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("btime ")) return std::stod(line.substr(6));
  }
  return 0;
}

size_t OpenFds() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    --n;  // the descriptor opendir itself holds
  }
  return n;
}

}  // namespace

std::string BackingIoDescription(IndexedStore& store) { return store.medium().IoStats().description; }

MediumIoStats BackingIoStatsOf(IndexedStore& store) { return store.medium().IoStats(); }

void RenderProcessMetrics(MetricsWriter& w) {
  std::vector<std::string> f = StatFields();
  double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (f.size() > 21 && tick > 0) {
    w.Family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    w.Sample("process_cpu_seconds_total", "", (std::stod(f[11]) + std::stod(f[12])) / tick);
    w.Family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
    w.Sample("process_start_time_seconds", "", BootTime() + std::stod(f[19]) / tick);
    w.Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    w.Sample("process_virtual_memory_bytes", "", std::stod(f[20]));
    w.Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    w.Sample("process_resident_memory_bytes", "", std::stod(f[21]) * page);
  }
  w.Family("process_open_fds", "gauge", "Number of open file descriptors.");
  w.Sample("process_open_fds", "", double(OpenFds()));
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) {
    w.Family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
    w.Sample("process_max_fds", "", double(r.rlim_cur));
  }
  w.Family("gpucache_build_info", "gauge", "Always 1; the labels say which build is running.");
  w.Sample("gpucache_build_info", Label("version", GPUCACHE_VERSION), 1);
}

void RenderBackingMetrics(MetricsWriter& w, BlockAdmin& store, const MediumIoStats& io,
                          bool operator_view) {
  StoreStats stats = store.Stats();
  w.Family("gpucache_backing_errors_total", "counter",
           "Backing I/O that failed: payload reads (op=read), renames and unlinks of block files "
           "(op=remove), writes of the journal, INDEX and PINS (op=metadata).");
  w.Sample("gpucache_backing_errors_total", "op=\"read\"", double(stats.read_errors));
  w.Sample("gpucache_backing_errors_total", "op=\"remove\"", double(stats.medium_errors));
  w.Sample("gpucache_backing_errors_total", "op=\"metadata\"", double(stats.metadata_errors));
  w.Family("gpucache_block_files_missing_total", "counter",
           "Indexed blocks whose file was gone at an open (removed outside gpucache): each left the "
           "namespace, a miss since.");
  w.Sample("gpucache_block_files_missing_total", "", double(stats.files_missing));

  // Each series is a counter of the reader that did the reads, as it counted them: never one
  // worked out from others (a difference of counters that count different reads, at different
  // moments, can go down, and Prometheus takes a decrease for a restart).
  const std::optional<UringReaderStats>& u = io.uring;
  uint64_t via_uring = u ? u->uring_reads : 0;
  uint64_t via_cache = u ? u->page_cache_reads : 0;
  uint64_t via_pread = u ? u->pread_reads : io.pread_reads;
  w.Family("gpucache_backing_reads_total", "counter",
           "Payload reads of block files (clients' reads, RAM-tier copies, cold packing), by the path that "
           "served them.");
  w.Sample("gpucache_backing_reads_total", "path=\"io_uring\"", double(via_uring));
  w.Sample("gpucache_backing_reads_total", "path=\"page_cache\"", double(via_cache));
  w.Sample("gpucache_backing_reads_total", "path=\"pread\"", double(via_pread));
  if (u) {
    w.Family("gpucache_io_pool_slots", "gauge", "io_uring registered buffer slots, by state.");
    w.Sample("gpucache_io_pool_slots", "state=\"free\"", double(u->pool.free));
    w.Sample("gpucache_io_pool_slots", "state=\"in_use\"", double(u->pool.checked_out));
    w.Sample("gpucache_io_pool_slots", "state=\"quarantined\"", double(u->pool.quarantined));
  }
  if (!operator_view) return;  // device paths are the operator's business
  std::vector<DomainInfo> domains = store.Domains();
  // One statvfs per directory; one that fails (the device gone, the path moved) has no sizes,
  // and says so in gpucache_data_dir_statvfs_ok rather than by its series going missing.
  std::vector<std::optional<struct statvfs>> space;
  for (const DomainInfo& d : domains) {
    struct statvfs s {};
    space.push_back(::statvfs(d.path.c_str(), &s) == 0 ? std::optional(s) : std::nullopt);
  }
  w.Family("gpucache_data_dir_statvfs_ok", "gauge",
           "1 if the data directory's filesystem answered statvfs at this scrape, 0 if not (its sizes are then missing).");
  for (size_t i = 0; i < domains.size(); ++i) {
    w.Sample("gpucache_data_dir_statvfs_ok", Label("dir", domains[i].path), space[i] ? 1 : 0);
  }
  auto each = [&](const char* name, const char* help, auto value) {
    w.Family(name, "gauge", help);
    for (size_t i = 0; i < domains.size(); ++i) {
      if (space[i]) w.Sample(name, Label("dir", domains[i].path), value(*space[i]));
    }
  };
  each("gpucache_data_dir_free_bytes", "Bytes available to the daemon in each data directory.",
       [](const struct statvfs& s) { return double(s.f_bavail) * double(s.f_frsize); });
  each("gpucache_data_dir_size_bytes", "Size of the filesystem holding each data directory.",
       [](const struct statvfs& s) { return double(s.f_blocks) * double(s.f_frsize); });
  each("gpucache_data_dir_free_files", "Inodes available in each data directory (each block is a file).",
       [](const struct statvfs& s) { return double(s.f_favail); });
  w.Family("gpucache_data_dir_isolated", "gauge", "1 once a data directory was taken out of service.");
  for (const DomainInfo& d : domains) {
    w.Sample("gpucache_data_dir_isolated", Label("dir", d.path), d.isolated ? 1 : 0);
  }
}

}  // namespace gpucache
