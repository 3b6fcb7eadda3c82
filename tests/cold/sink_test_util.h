// Helpers shared by the sink's tests (sink_test.cc, sink_retention_test.cc).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "cold/sink.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold::testing {

inline ObjectError Temporary() { return {ObjectErrorKind::kTemporary, 503, "SlowDown", "", true}; }
inline ObjectError Permanent() { return {ObjectErrorKind::kPermanent, 403, "AccessDenied", ""}; }
// Three attempts with backoffs of milliseconds, and no background re-drive: tests stay fast.
inline SinkLimits Fast(int attempts = 3) {
  SinkLimits l;
  l.max_attempts = attempts;
  l.backoff_base_ms = 2;
  l.backoff_max_ms = 8;
  l.redrive_interval_ms = 0;
  return l;
}
inline uint64_t WallNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}
// The retention record's deadline as the store holds it now.
inline uint64_t RetentionIn(MemoryObjectStore& s3, const std::string& key) {
  auto record = s3.Objects().at(key);
  return DecodeRetention({reinterpret_cast<const char*>(record.data()), record.size()});
}

}  // namespace gpucache::cold::testing
