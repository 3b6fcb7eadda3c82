// ColdUploadLog: what the cold tier's background uploads did, as the log lines an operator
// reading the journal needs (cold/ logs nothing itself; ColdTier hands each drain round's
// report here, daemon/daemon_cold.cc). Without them an object store that started refusing
// uploads moved only the metrics.
//
// A dead or hostile object store fails every upload of every round, so each warning is
// logged at most once per `interval` and says how many jobs it stands for (counted since the
// last line of its kind), with the first error of that kind among them, escaped
// (common/printable.h: the code and message come from the object store). The line that says uploads succeed again
// follows only a warning, so there are never more of it than of them.
//
// Thread safety: Note is called by one thread at a time (the tier's background thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>

#include "cold/sink.h"
#include "fs/log.h"

namespace gpucache {

class ColdUploadLog {
 public:
  explicit ColdUploadLog(std::chrono::nanoseconds interval = std::chrono::minutes(1))
      : failed_lines_(interval), requeued_lines_(interval) {}

  // One drain round's report.
  void Note(const cold::DrainReport& round);

 private:
  // Jobs of one kind (moved to the failed queue, or requeued after a temporary error) not yet
  // in a line, and the first error among them.
  struct Unlogged {
    size_t jobs = 0;
    std::optional<cold::JobError> first_error;
    void Add(size_t n, const std::optional<cold::JobError>& error);
  };
  void LogFailed(size_t failed_now);
  void LogRequeued();
  void LogRecovered(size_t uploaded);

  LogLimiter failed_lines_, requeued_lines_;
  Unlogged failed_, requeued_;
  bool warned_ = false;  // a warning was logged since uploads were last said to succeed
};

}  // namespace gpucache
