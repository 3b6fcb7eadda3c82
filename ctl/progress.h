// Progress of a long gpucachectl operation: a bar with rate and ETA on a terminal, plain lines
// (one per tenth of the work) when stderr is a file or a pipe, so logs stay readable.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace gpucache::ctl {

class Progress {
 public:
  Progress(std::string label, uint64_t total)
      : label_(std::move(label)), total_(total), tty_(::isatty(2)), start_(Clock::now()) {}
  ~Progress() { Done(); }

  void Step(uint64_t n = 1) {
    done_ += n;
    if (tty_) {
      Bar();
    } else if (total_ && done_ * 10 / total_ != last_tenth_) {
      last_tenth_ = done_ * 10 / total_;
      std::fprintf(stderr, "%s: %llu/%llu\n", label_.c_str(), (unsigned long long)done_,
                   (unsigned long long)total_);
    }
  }
  void Done() {
    if (finished_) return;
    finished_ = true;
    if (tty_) {
      Bar();
      std::fputc('\n', stderr);
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  void Bar() {
    double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    double rate = secs > 0 ? done_ / secs : 0;
    double eta = rate > 0 && total_ > done_ ? (total_ - done_) / rate : 0;
    int width = 30, filled = total_ ? int(width * done_ / total_) : width;
    std::fprintf(stderr, "\r%s [%.*s%*s] %llu/%llu %.1f/s ETA %.0fs", label_.c_str(), filled,
                 "==============================", width - filled, "", (unsigned long long)done_,
                 (unsigned long long)total_, rate, eta);
  }
  std::string label_;
  uint64_t total_, done_ = 0, last_tenth_ = 0;
  bool tty_, finished_ = false;
  Clock::time_point start_;
};

}  // namespace gpucache::ctl
