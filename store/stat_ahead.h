// StatAhead: the stat of every name of a directory, taken on a helper thread while the caller
// works through the names before it (FileLoader's start: on a start from INDEX the stats are
// about half the work, one path lookup and syscall per block).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "store/env.h"
#include "store/posix_io.h"

namespace gpucache {

// Only over the POSIX Env: a test Env sees its calls in a fixed order. Thread safety: one
// caller; Get(i) for increasing or repeated i.
class StatAhead {
 public:
  StatAhead(Env& env, int dir_fd, const std::vector<std::string>& names, bool enabled)
      : count_(enabled && names.size() >= kMinNames ? names.size() : 0) {
    if (count_ == 0) return;
    // Left unconstructed here: the helper constructs each stat as it takes it (filling 100,000
    // placeholders first cost the loading thread tens of milliseconds of page faults).
    stats_ = std::allocator<Result<FileStat>>().allocate(count_);
    AdviseHugePages(stats_, count_ * sizeof(Result<FileStat>));
    helper_ = std::thread([this, &env, dir_fd, &names] {
      for (size_t i = 0; i < names.size(); ++i) {
        std::construct_at(stats_ + i, env.StatAt(dir_fd, names[i]));
        if ((i + 1) % kBatch == 0 || i + 1 == names.size()) {
          done_.store(i + 1, std::memory_order_release);
          done_.notify_one();
        }
      }
    });
  }
  ~StatAhead() {
    if (count_ == 0) return;
    helper_.join();  // then every stat is constructed
    std::destroy_n(stats_, count_);
    std::allocator<Result<FileStat>>().deallocate(stats_, count_);
  }
  StatAhead(const StatAhead&) = delete;
  StatAhead& operator=(const StatAhead&) = delete;
  // The stat of name `i`, waiting for the helper to get there; null without a helper.
  const Result<FileStat>* Get(size_t i) {
    if (count_ == 0) return nullptr;
    for (size_t done = done_.load(std::memory_order_acquire); done <= i;
         done = done_.load(std::memory_order_acquire)) {
      done_.wait(done, std::memory_order_acquire);
    }
    return &stats_[i];
  }

 private:
  static constexpr size_t kMinNames = 4096;  // below this a thread costs more than it saves
  static constexpr size_t kBatch = 512;      // names per wake-up of the loading thread
  const size_t count_;
  Result<FileStat>* stats_ = nullptr;  // count_ of them, constructed below done_
  std::atomic<size_t> done_{0};
  std::thread helper_;
};

}  // namespace gpucache
