// Helpers shared by the sink's tests (sink_test.cc, sink_retention_test.cc).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>

#include "cold/sink.h"
#include "tests/cold/cold_test_util.h"
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
// `p` uploaded whole through a sink of its own (object, manifest, locators); `p` back.
inline PackedPair Uploaded(ObjectStore& s3, PackedPair p) {
  Sink sink(s3, kPrefix, {});
  PackedPair copy = p;
  REQUIRE(sink.Submit(std::move(copy)).admission == Admission::kAccepted);
  REQUIRE(sink.Drain().uploaded == 1);
  return p;
}

// The retention record's deadline as the store holds it now.
inline uint64_t RetentionIn(MemoryObjectStore& s3, const std::string& key) {
  auto record = s3.Objects().at(key);
  return DecodeRetention({reinterpret_cast<const char*>(record.data()), record.size()});
}

}  // namespace gpucache::cold::testing
