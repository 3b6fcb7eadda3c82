#include "fs/housekeeper.h"

#include <time.h>

#include <chrono>

namespace gpucache {

void Housekeeper::Start() { thread_ = std::thread([this] { Run(); }); }

void Housekeeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Housekeeper::Run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
    lock.unlock();
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);  // the store stamps activity with CLOCK_REALTIME
    store_.ExpireReservations(uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec));
    lock.lock();
  }
}

}  // namespace gpucache
