// Tells the kernel to forget cached entries and pages for blocks that left the namespace
// behind its back (corruption found on read, and later eviction).
//
// Notifications are sent from a thread of their own: libfuse forbids sending them from a
// request handler that may hold the locks they need.
//
// Thread safety: Push may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "store/mutex.h"

struct fuse_session;

namespace gpucache {

class Invalidator {
 public:
  Invalidator() = default;
  ~Invalidator();
  void Start(fuse_session* se);
  void Stop();
  // Asks the thread to stop and waits up to `wait` for it: false if it is still in the kernel
  // (an invalidation waiting for a directory's lock, held by a request nobody answers once the
  // loop has ended). Stop() then joins it.
  bool StopWithin(std::chrono::milliseconds wait);
  // Forget the dentry `name` in directory `parent`, and the pages of `ino` if non-zero.
  void Push(uint64_t parent, std::string name, uint64_t ino);
  // Forget the cached pages (and attributes) of `ino` only.
  void PushPages(uint64_t ino) { Push(0, std::string(), ino); }
  // The same, done before returning, so that the caller's reply cannot race it (a block found
  // corrupt answers EIO only once its name is gone; a refill answers "hit" only once the
  // kernel's misses along its path are). REQUIRES: not on the path of a request the kernel
  // holds the directory's lock for (lookup, create, mkdir, unlink, rmdir, rename, link in
  // `parent`; setattr, setxattr, unlink, rename of the entry itself): libfuse's rule for
  // notifications, which would otherwise deadlock. With `ino`, not on a read of that inode
  // either (the reader holds a page the invalidation waits for).
  void Now(uint64_t parent, const std::string& name, uint64_t ino);

 private:
  struct Item {
    uint64_t parent;
    std::string name;
    uint64_t ino;
  };
  void Run();

  fuse_session* se_ = nullptr;
  Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Item> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<bool> done_{false};  // Run returned
};

}  // namespace gpucache
