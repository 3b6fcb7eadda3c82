// SparePool: empty files made ahead of need, so that a reservation's CREATE does not pay the
// filesystem's inode allocation on the request path (docs/performance.md, "Data path"). One
// background thread keeps up to `depth` of them in each data directory's spare/ folder and is
// woken whenever one is taken; FileMedium::Prepare writes the reservation's payload into the
// spare where it lies (no inode allocated, no directory entry moved) and creates
// tmp/<region>.part itself only when none is ready.
//
// spare/ is emptied at every start, before the pool fills it: what a crash left there is
// either unused or an unfinished payload, never a block. The destructor unlinks the spares left.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>  // std::once_flag too
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/env.h"
#include "store/posix_io.h"
#include "store/mutex.h"

namespace gpucache {

struct SpareFile {
  Fd fd;
  std::string path;
};

class SparePool {
 public:
  // `dirs`: the spare/ folder of every data directory, by device index (already empty).
  SparePool(Env& env, std::vector<std::string> dirs, size_t depth);
  ~SparePool();
  SparePool(const SparePool&) = delete;
  SparePool& operator=(const SparePool&) = delete;

  // A spare file of device `dev`, or nullopt if none is ready; wakes the refill either way.
  std::optional<SpareFile> Take(size_t dev);
  // Device `dev` left service: its spares are unlinked and it is never refilled.
  void Retire(size_t dev);
  // Spares ready now on device `dev` (for tests). Starts the pool's thread like Take.
  size_t Ready(size_t dev);

 private:
  struct Device {
    std::string dir;
    std::vector<SpareFile> ready;
    bool retired = false;
  };
  void StartOnce();
  void Run();
  // Creates spares for `dev` until it holds depth_ or a create fails. Called without mu_.
  void Fill(size_t dev);

  Env& env_;
  const size_t depth_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::vector<Device> devices_ GUARDED_BY(mu_);
  uint64_t next_name_ GUARDED_BY(mu_) = 0;
  bool wanted_ GUARDED_BY(mu_) = true;  // fill once at start
  bool stop_ GUARDED_BY(mu_) = false;
  std::once_flag started_;
  std::thread thread_;  // started by the first Take or Ready (StartOnce)
};

}  // namespace gpucache
