// Periodic store upkeep while mounted: abandons reservations idle past their lease.
//
// Thread safety: Start/Stop from one thread; the work runs on its own thread.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "store/block_store.h"
#include "store/mutex.h"

namespace gpucache {

class Housekeeper {
 public:
  explicit Housekeeper(BlockFills& store) : store_(store) {}
  ~Housekeeper() { Stop(); }
  void Start();
  void Stop();

 private:
  void Run();
  BlockFills& store_;
  Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucache
