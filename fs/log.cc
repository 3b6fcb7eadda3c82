#include "fs/log.h"

#include <atomic>
#include <utility>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <syslog.h>

#include <cstdlib>

namespace gpucache {
namespace {

// "<N>": the syslog priority prefix journald reads from a service's stderr (sd-daemon(3)).
class PriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr const char* kPriority[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
    std::string_view p = kPriority[static_cast<int>(msg.level)];
    dest.append(p.data(), p.data() + p.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PriorityFlag>();
  }
};

}  // namespace

void InitLogging(const std::string& level) {
  spdlog::drop("gpucachefs");
  auto logger = spdlog::stderr_logger_mt("gpucachefs");
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (std::getenv("JOURNAL_STREAM")) {
    formatter->add_flag<PriorityFlag>('*').set_pattern("%*%v");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e gpucachefs %l: %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

namespace {
std::atomic<uint64_t> g_suppressed_total{0};
}  // namespace

uint64_t LogLinesSuppressed() { return g_suppressed_total.load(std::memory_order_relaxed); }

bool BurstLimiter::Allow(uint32_t key, uint64_t* suppressed) {
  auto now = std::chrono::steady_clock::now();
  MutexLock lock(mu_);
  if (windows_.size() > 4096) windows_.clear();  // a bound, not a cache
  Window& w = windows_[key];
  if (now - w.start >= window_) {
    w.start = now;
    w.lines = 0;
  }
  if (w.lines >= per_window_) {
    w.suppressed++;
    g_suppressed_total.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  w.lines++;
  *suppressed = std::exchange(w.suppressed, 0);
  return true;
}

bool LogLimiter::Allow() {
  int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t last = last_.load(std::memory_order_relaxed);
  if (now - last >= interval_ && last_.compare_exchange_strong(last, now)) return true;
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  g_suppressed_total.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void SwitchToSyslog() {
  auto level = spdlog::default_logger()->level();
  spdlog::drop("gpucachefs");
  auto logger = spdlog::syslog_logger_mt("gpucachefs", "gpucachefs", LOG_PID, LOG_DAEMON);
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

}  // namespace gpucache
