// The sink's retention record (cold/sink.cc): a step of the upload before the manifest,
// retried like the others, written again when a job resumes at its manifest, and never
// shortened by a retry.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cold/locator.h"
#include "cold/sink.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/sink_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {

// A sink with an hour's retention whose one job failed at its manifest (a permanent error,
// waiting for an operator's retry), and the manifest's digest.
struct FailedAtManifest {
  static constexpr uint64_t kHour = 3600ull * 1'000'000'000ull;
  MemoryObjectStore s3;
  bool deny_manifest = true;
  Sink sink{s3, kPrefix, Fast(), std::make_shared<LocatorLocks>(), kHour};
  Sha256 manifest{};
  FailedAtManifest() {
    s3.SetFault([this](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
      if (q.verb == "PUT" && q.key.find("/manifests/") != std::string::npos && deny_manifest) return Permanent();
      return std::nullopt;
    });
    PackedPair p = MakePack(0, 1);
    manifest = p.manifest_digest;
    REQUIRE(sink.Submit(std::move(p)).admission == Admission::kAccepted);
    REQUIRE(sink.Drain().newly_failed == 1);
  }
  // The operator's retry, the manifest's PUT allowed now.
  void Retry() {
    deny_manifest = false;
    REQUIRE(sink.Retry(sink.Failed().at(0).id));
    CHECK(sink.Drain().uploaded == 1);
  }
  uint64_t Retention() { return RetentionIn(s3, RetentionKey(kPrefix, manifest)); }
};

// Review of stop 44: a job that failed at its manifest resumed there, so its retention record
// kept the first attempt's deadline; after a backoff (or days waiting for an operator's retry)
// the manifest could be reclaimable the moment it became visible.
TEST_CASE("Sink: a job resumed at its manifest writes its retention record again") {
  FailedAtManifest f;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const uint64_t retried = WallNowNs();
  f.Retry();
  CHECK(f.Retention() >= retried + FailedAtManifest::kHour);
}

// Review of the fix above: rewriting the record on a retry could shorten a longer retention an
// operator set meanwhile (cold.retain) on a manifest whose failed PUT had landed after all.
TEST_CASE("Sink: a retried job never shortens a retention record already there") {
  FailedAtManifest f;
  const uint64_t year = UINT64_MAX / 4;  // an operator's retain, far past the sink's hour
  const std::string operators = EncodeRetention(year);
  f.s3.Set(RetentionKey(kPrefix, f.manifest), std::vector<uint8_t>(operators.begin(), operators.end()));
  f.Retry();
  CHECK(f.Retention() == year);
}

}  // namespace

// Regression (review, 2026-12-06): the retention record was one PUT after the upload, its
// result ignored: after a single 503 a new manifest had no retention, and was visible (and
// reclaimable) before its record even when that PUT worked.
TEST_CASE("Sink: with a retention the record is a step before the manifest, retried like the others") {
  const uint64_t hour = 3600ull * 1'000'000'000ull;
  MemoryObjectStore s3;
  int faults = 1;
  s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "PUT" && q.key.find("/retention/") != std::string::npos && faults > 0) return faults--, Temporary();
    return std::nullopt;
  });
  Sink sink(s3, kPrefix, Fast(), std::make_shared<LocatorLocks>(), hour);
  PackedPair p = MakePack(0, 2);
  const Sha256 manifest = p.manifest_digest;
  const uint64_t before = WallNowNs();
  REQUIRE(sink.Submit(std::move(p)).admission == Admission::kAccepted);
  DrainReport r = sink.Drain();
  CHECK(r.uploaded == 1);
  CHECK(r.requeued == 1);
  REQUIRE(r.first_error);
  CHECK(r.first_error->step == "retention");
  std::vector<std::string> puts;  // what each PUT was, in order
  for (const auto& q : s3.Log()) {
    if (q.verb != "PUT") continue;
    for (const char* kind : {"packs", "retention", "manifests", "locators"}) {
      if (q.key.find(std::string("/") + kind + "/") != std::string::npos) puts.push_back(kind);
    }
  }
  CHECK(puts == std::vector<std::string>{"packs", "retention", "retention", "manifests", "locators", "locators"});
  CHECK(RetentionIn(s3, RetentionKey(kPrefix, manifest)) >= before + hour);

  MemoryObjectStore plain;  // no retention: no record, no request for one
  Sink without(plain, kPrefix, Fast());
  REQUIRE(without.Submit(MakePack(0, 2)).admission == Admission::kAccepted);
  CHECK(without.Drain().uploaded == 1);
  CHECK(plain.Count("PUT") == 4);
}

}  // namespace gpucache::cold
