// Daemon logging: spdlog to stderr, one line per event an operator should know about.
//
// Under systemd (JOURNAL_STREAM set) each line starts with its syslog priority, "<3>" for an
// error and so on, which journald turns into the entry's priority; otherwise lines carry a time
// stamp and a level. Nothing secret is logged: paths, tenants, counts, errno names.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

#include "store/mutex.h"

namespace gpucache {

// `level`: "error", "warn", "info" or "debug" (checked by the caller).
void InitLogging(const std::string& level);
// After detaching (mount helper mode) stderr is gone: log to syslog instead.
void SwitchToSyslog();

// Log lines every LogLimiter refused since the start (gpucache_log_lines_suppressed_total).
uint64_t LogLinesSuppressed();

// Up to `per_window` lines in each `window` per key (a burst), the rest suppressed and counted
// in LogLinesSuppressed; Allow reports how many were suppressed in the windows before.
class BurstLimiter {
 public:
  BurstLimiter(int per_window, std::chrono::nanoseconds window) : per_window_(per_window), window_(window) {}
  // True to log now; `suppressed` gets how many lines of `key` were dropped since its last one.
  bool Allow(uint32_t key, uint64_t* suppressed);

 private:
  struct Window {
    std::chrono::steady_clock::time_point start;
    int lines = 0;
    uint64_t suppressed = 0;
  };
  const int per_window_;
  const std::chrono::nanoseconds window_;
  Mutex mu_;
  std::map<uint32_t, Window> windows_ GUARDED_BY(mu_);  // cleared past 4096 keys
};

// One log line per burst: Allow() is true at most once per `interval`, and Suppressed() then
// says how many calls it refused since the last line. For events a hostile caller can repeat.
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::nanoseconds interval) : interval_(interval.count()) {}
  bool Allow();
  uint64_t Suppressed() { return suppressed_.exchange(0); }

 private:
  const int64_t interval_;
  std::atomic<int64_t> last_{INT64_MIN / 2};
  std::atomic<uint64_t> suppressed_{0};
};

}  // namespace gpucache
