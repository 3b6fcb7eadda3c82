#include "fs/stop_watchdog.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

namespace gpucache {

StopWatchdog::StopWatchdog(std::function<bool()> stopping, std::function<void()> abort,
                           std::chrono::milliseconds deadline)
    : stopping_(std::move(stopping)), abort_(std::move(abort)), deadline_(deadline) {
  thread_ = std::thread([this] { Run(); });
}

StopWatchdog::~StopWatchdog() {
  LoopReturned();
  if (thread_.joinable()) thread_.join();
}

void StopWatchdog::LoopReturned() {
  {
    MutexLock lock(mu_);
    returned_ = true;
  }
  cv_.notify_all();
}

std::chrono::milliseconds StopWatchdog::DeadlineFromEnv() {
  if (const char* v = std::getenv("GPUCACHE_STOP_ABORT_MS")) {
    long ms = std::strtol(v, nullptr, 10);
    if (ms > 0) return std::chrono::milliseconds(ms);
  }
  return std::chrono::seconds(10);
}

bool StopWatchdog::ReturnedWithin(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  MutexLock lock(mu_);
  while (!returned_ && cv_.wait_until(mu_, until) == std::cv_status::no_timeout) {
  }
  return returned_;
}

void StopWatchdog::Run() {
  // The loop's stop is a flag libfuse's signal handler sets: asked for every 100 ms, which
  // costs nothing while the daemon serves.
  while (!ReturnedWithin(std::chrono::milliseconds(100))) {
    if (!stopping_()) continue;
    if (ReturnedWithin(deadline_)) return;
    spdlog::warn("stop: a request is still running {} ms after the stop began (a thread waiting "
                 "in the kernel for a lock a request nobody answers holds, or a request that is "
                 "only slow): aborting the FUSE connection, requests still waiting get ECONNABORTED",
                 deadline_.count());
    abort_();
    return;
  }
}

}  // namespace gpucache
