// A gate a test's Env holds one call at (Hold) until the test opens it (Release): the window
// between two steps of the store, made wide on purpose. WaitHeld returns once a call is held.
#pragma once

#include <condition_variable>
#include <mutex>

namespace gpucache::test {

class Gate {
 public:
  // Waits for Release; only the first call holds if `once` (later ones pass at once).
  void Hold(bool once = false) {
    std::unique_lock l(mu_);
    if (once && held_) return;
    held_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return released_; });
  }
  void WaitHeld() {
    std::unique_lock l(mu_);
    cv_.wait(l, [&] { return held_; });
  }
  void Release() {
    std::lock_guard l(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, released_ = false;
};

}  // namespace gpucache::test
