#include "fs/housekeeper.h"

#include "store/clock.h"

#include <time.h>

#include <chrono>

namespace gpucache {

void Housekeeper::Start() { thread_ = std::thread([this] { Run(); }); }

void Housekeeper::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Housekeeper::Run() {
  MutexLock lock(mu_);
  for (;;) {
    // Once a second, or at once when stopped (a wakeup without either only waits again).
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!stop_ && cv_.wait_until(mu_, until) == std::cv_status::no_timeout) {
    }
    if (stop_) return;
    lock.Unlock();
    store_.ExpireReservations(LeaseNowNs());  // the clock the store stamps activity with
    lock.Lock();
  }
}

}  // namespace gpucache
