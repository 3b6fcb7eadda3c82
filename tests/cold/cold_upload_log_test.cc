// The log lines of the cold tier's background uploads (daemon/cold_upload_log.h), from the
// reports of real drain rounds of a Sink against the in-memory object store.
#include "daemon/cold_upload_log.h"

#include <doctest/doctest.h>

#include <chrono>
#include <sstream>
#include <string>

#include "cold/sink.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/sink_test_util.h"
#include "tests/support/log_capture.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {

// The first line of `log` that contains `marker`, or "".
std::string LineWith(const std::string& log, const std::string& marker) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(marker) != std::string::npos) return line;
  }
  return "";
}

}  // namespace

// One round in which one job hears a temporary error (requeued) and the next a permanent one
// (failed): each warning names the error of its own kind. Both used to name the round's first
// error of any kind, so the failed-queue warning blamed a SlowDown for an AccessDenied.
TEST_CASE("Cold upload log: each warning names the first error of its own kind") {
  MemoryObjectStore s3;
  PackedPair slow = MakePack(0, 1), denied = MakePack(1, 1);
  const std::string slow_key = slow.manifest_key, denied_key = denied.manifest_key;
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb != "PUT") return std::nullopt;
    if (r.key == slow_key) return Temporary();
    if (r.key == denied_key) return Permanent();
    return std::nullopt;
  });
  SinkLimits limits = Fast();
  limits.concurrency = 1;  // jobs settle in the order submitted: the temporary error first
  Sink sink(s3, kPrefix, limits);
  REQUIRE(sink.Submit(std::move(slow)).admission == Admission::kAccepted);
  REQUIRE(sink.Submit(std::move(denied)).admission == Admission::kAccepted);
  DrainReport round = sink.DrainRound();
  REQUIRE(round.requeued == 1);
  REQUIRE(round.newly_failed == 1);

  test::LogCapture log;
  ColdUploadLog upload_log(std::chrono::nanoseconds(0));
  upload_log.Note(round);
  const std::string text = log.text();
  const std::string failed = LineWith(text, "moved to the failed queue");
  const std::string requeued = LineWith(text, "failed with a temporary error");
  REQUIRE(failed != "");
  REQUIRE(requeued != "");
  CHECK(failed.find("AccessDenied") != std::string::npos);
  CHECK(failed.find("SlowDown") == std::string::npos);
  CHECK(requeued.find("SlowDown") != std::string::npos);
  CHECK(requeued.find("AccessDenied") == std::string::npos);
}

}  // namespace gpucache::cold
