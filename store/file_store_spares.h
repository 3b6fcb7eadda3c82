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
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "store/env.h"
#include "store/posix_io.h"

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
  // Spares ready now on device `dev` (for tests).
  size_t Ready(size_t dev) const;

 private:
  struct Device {
    std::string dir;
    std::vector<SpareFile> ready;
    bool retired = false;
  };
  void Run();
  // Creates spares for `dev` until it holds depth_ or a create fails. Called without mu_.
  void Fill(size_t dev);

  Env& env_;
  const size_t depth_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Device> devices_;  // guarded by mu_
  uint64_t next_name_ = 0;       // guarded by mu_
  bool wanted_ = true;           // guarded by mu_: fill once at start
  bool stop_ = false;            // guarded by mu_
  std::thread thread_;           // last: started once everything above exists
};

}  // namespace gpucache
