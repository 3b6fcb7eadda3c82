// Mutex and MutexLock: std::mutex and its guard, annotated for clang's thread-safety analysis
// (libstdc++'s std::mutex carries no annotations, so the analysis cannot see it).
//
// MutexLock holds the mutex for its scope, like std::unique_lock: Unlock() lets go early (to
// call a medium or an observer outside the lock) and Lock() takes it again.
#pragma once

#include <mutex>

#include "store/thread_annotations.h"

namespace gpucache {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // BasicLockable, for std::condition_variable_any, whose wait lets go and takes it again.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds the mutex (where it cannot follow).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_.Unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace gpucache
