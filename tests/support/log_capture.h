// Captures what the daemon logs (spdlog's default logger, fs/log.h) while it lives, so that a
// test can check that an operator is told of an event. Restores the logger it replaced.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

namespace gpucache::test {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%l: %v");
    auto logger = std::make_shared<spdlog::logger>("log_capture", sink);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;  // declared before the logger that writes to it is made
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace gpucache::test
