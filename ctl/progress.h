// Progress of a long gpucachectl operation: a bar with rate and ETA on a terminal, plain lines
// (one per tenth of the work) when stderr is a file or a pipe, so logs stay readable. Nothing
// at all until the work has taken `delay` (a sub-second scan prints no progress), and with
// `terminal_only` nothing unless stderr is a terminal (a scan's progress is noise in a log).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace gpucache::ctl {

struct ProgressOptions {
  bool terminal_only = false;
  std::chrono::milliseconds delay{1000};
  bool tty = ::isatty(2);  // whether `out` is a terminal
  std::FILE* out = stderr;
};

class Progress {
 public:
  Progress(std::string label, uint64_t total, ProgressOptions options = {})
      : label_(std::move(label)), total_(total), o_(options), start_(Clock::now()) {}
  ~Progress() { Done(); }

  void Step(uint64_t n = 1) {
    done_ += n;
    if (!Visible()) return;
    if (o_.tty) {
      Bar();
    } else if (total_ && done_ * 10 / total_ != last_tenth_) {
      last_tenth_ = done_ * 10 / total_;
      std::fprintf(o_.out, "%s: %llu/%llu\n", label_.c_str(), (unsigned long long)done_,
                   (unsigned long long)total_);
    }
  }
  void Done() {
    if (finished_) return;
    finished_ = true;
    if (o_.tty && shown_) {
      Bar();
      std::fputc('\n', o_.out);
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool Visible() {
    if (o_.terminal_only && !o_.tty) return false;
    if (!shown_ && Clock::now() - start_ < o_.delay) return false;
    shown_ = true;
    return true;
  }
  void Bar() {
    double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    double rate = secs > 0 ? done_ / secs : 0;
    double eta = rate > 0 && total_ > done_ ? (total_ - done_) / rate : 0;
    int width = 30, filled = total_ ? int(width * done_ / total_) : width;
    std::fprintf(o_.out, "\r%s [%.*s%*s] %llu/%llu %.1f/s ETA %.0fs", label_.c_str(), filled,
                 "==============================", width - filled, "", (unsigned long long)done_,
                 (unsigned long long)total_, rate, eta);
  }
  std::string label_;
  uint64_t total_, done_ = 0, last_tenth_ = 0;
  ProgressOptions o_;
  bool finished_ = false, shown_ = false;
  Clock::time_point start_;
};

}  // namespace gpucache::ctl
