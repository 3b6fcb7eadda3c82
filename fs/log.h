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

namespace gpucache {

// `debug` lowers the level to debug.
void InitLogging(bool debug);
// After detaching (mount helper mode) stderr is gone: log to syslog instead.
void SwitchToSyslog();

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
