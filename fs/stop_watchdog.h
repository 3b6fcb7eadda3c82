// What ends a stop that cannot finish by itself. After SIGTERM the FUSE loop waits for every
// request thread to return, and a thread can wait in the kernel for good: a commit's entry
// invalidation waits for its namespace directory's lock, which a LOOKUP there holds until the
// daemon answers it, and no thread reads requests once the loop is stopping. The loop then
// never returns, the unit's stop times out, and SIGKILL leaves a process that cannot exit
// holding the mount (docs/reliability.md, "A daemon that cannot exit"). This watchdog aborts
// the daemon's own FUSE connection when the loop has not returned some time after it was told
// to stop: the waiting requests fail (ECONNABORTED), the lock is let go, the thread returns, and
// the daemon stops as it would have. A request that is only slow (a refill waiting on S3) is
// answered ECONNABORTED too, and still runs to its end before the daemon exits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <thread>

#include "store/mutex.h"

namespace gpucache {

class StopWatchdog {
 public:
  // `stopping` says whether the loop was told to stop (polled); `abort` ends the connection.
  StopWatchdog(std::function<bool()> stopping, std::function<void()> abort, std::chrono::milliseconds deadline);
  ~StopWatchdog();  // LoopReturned, then joins
  StopWatchdog(const StopWatchdog&) = delete;
  StopWatchdog& operator=(const StopWatchdog&) = delete;

  void LoopReturned();
  // GPUCACHE_STOP_ABORT_MS (tests) or 10 s: well inside the unit's TimeoutStopSec=30, long
  // enough for a request that is only slow (a fill's fsync) to finish on its own.
  static std::chrono::milliseconds DeadlineFromEnv();

 private:
  void Run();
  // Waits up to `d` for LoopReturned; true if it came.
  bool ReturnedWithin(std::chrono::milliseconds d);

  std::function<bool()> stopping_;
  std::function<void()> abort_;
  std::chrono::milliseconds deadline_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool returned_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucache
