#include "fs/invalidator.h"

#include <fuse_lowlevel.h>

#include <thread>

namespace gpucache {

Invalidator::~Invalidator() { Stop(); }

void Invalidator::Start(fuse_session* se) {
  se_ = se;
  thread_ = std::thread([this] { Run(); });
}

bool Invalidator::StopWithin(std::chrono::milliseconds wait) {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return true;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!done_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done_.load();
}

void Invalidator::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Invalidator::Push(uint64_t parent, std::string name, uint64_t ino) {
  {
    MutexLock lock(mu_);
    if (stop_) return;
    queue_.push_back({parent, std::move(name), ino});
  }
  cv_.notify_one();
}

void Invalidator::Now(uint64_t parent, const std::string& name, uint64_t ino) {
  if (!se_) return;
  // Errors (ENOENT: the kernel had nothing cached) are expected and harmless.
  if (!name.empty()) fuse_lowlevel_notify_inval_entry(se_, parent, name.c_str(), name.size());
  if (ino) fuse_lowlevel_notify_inval_inode(se_, ino, 0, 0);
}

void Invalidator::Run() {
  MutexLock lock(mu_);
  for (;;) {
    while (!stop_ && queue_.empty()) cv_.wait(mu_);
    if (stop_) {
      done_.store(true);
      return;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    Now(item.parent, item.name, item.ino);
    lock.Lock();
  }
}

}  // namespace gpucache
