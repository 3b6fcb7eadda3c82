#include "cold/sink.h"

#include <doctest/doctest.h>

#include <map>
#include <random>

#include "cold/locator.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {
ObjectError Temporary() { return {ObjectErrorKind::kTemporary, 503, "SlowDown", "", true}; }
ObjectError Permanent() { return {ObjectErrorKind::kPermanent, 403, "AccessDenied", ""}; }
}  // namespace

TEST_CASE("Sink: a drained job uploads object, manifest and locators, and deletes nothing") {
  MemoryObjectStore s3;
  Sink sink(s3, kPrefix, {});
  PackedPair p = MakePack(0, 3);
  PackedPair copy = p;
  REQUIRE(sink.Submit(std::move(p)).admission == Admission::kAccepted);
  DrainReport r = sink.Drain();
  CHECK(r.uploaded == 1);
  CHECK(r.pending == 0);
  CHECK_FALSE(r.first_error);
  auto objects = s3.Objects();
  CHECK(objects.at(copy.object_key) == copy.object);
  CHECK(objects.at(copy.manifest_key) == copy.manifest);
  for (const ManifestEntry& e : copy.decoded.entries) {
    auto l = DecodeLocator(objects.at(LocatorKey(kPrefix, e.address)));
    REQUIRE(l);
    CHECK(l->manifest_digest == copy.manifest_digest);
    CHECK(l->address == e.address);
  }
  CHECK(s3.Count("DELETE") == 0);
  CHECK(sink.Stats().bytes_held == 0);
}

TEST_CASE("Sink: an invalid pair is refused before admission") {
  MemoryObjectStore s3;
  Sink sink(s3, kPrefix, {});
  PackedPair p = MakePack(0, 1);
  p.object[20] ^= 0xff;
  SubmitOutcome o = sink.Submit(std::move(p));
  CHECK(o.admission == Admission::kInvalid);
  CHECK(o.detail != "");
  CHECK(sink.Stats().pending == 0);
}

TEST_CASE("Sink: pending and failed jobs share the job and byte limits") {
  MemoryObjectStore s3;
  s3.SetFault([](const MemoryObjectStore::Request&) { return Permanent(); });
  SinkLimits limits;
  limits.max_jobs = 2;
  Sink sink(s3, kPrefix, limits);
  CHECK(sink.Submit(MakePack(0, 1)).admission == Admission::kAccepted);
  sink.Drain();  // fails: now held by the failed queue
  CHECK(sink.Failed().size() == 1);
  CHECK(sink.Submit(MakePack(1, 1)).admission == Admission::kAccepted);
  CHECK(sink.Submit(MakePack(2, 1)).admission == Admission::kFull);
  REQUIRE(sink.Drop(sink.Failed()[0].id));
  CHECK(sink.Submit(MakePack(2, 1)).admission == Admission::kAccepted);

  PackedPair big = MakePack(10, 1, 8192);
  SinkLimits bytes;
  bytes.max_bytes = big.bytes() - 1;
  Sink small(s3, kPrefix, bytes);
  CHECK(small.Submit(std::move(big)).admission == Admission::kFull);
}

TEST_CASE("Sink: temporary errors retry at the tail, three attempts in all") {
  MemoryObjectStore s3;
  std::string victim;
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT" && r.key == victim) return Temporary();
    return std::nullopt;
  });
  Sink sink(s3, kPrefix, {});
  PackedPair a = MakePack(0, 1), b = MakePack(1, 1);
  victim = a.manifest_key;
  sink.Submit(std::move(a));
  sink.Submit(std::move(b));
  DrainReport first = sink.DrainRound();
  CHECK(first.attempted == 2);  // each job once per round
  CHECK(first.uploaded == 1);
  CHECK(first.requeued == 1);
  REQUIRE(first.first_error);
  CHECK(first.first_error->step == "manifest");
  DrainReport rest = sink.Drain();
  CHECK(rest.attempted == 2);
  CHECK(rest.failed == 1);
  size_t object_puts = 0, manifest_puts = 0;
  for (const auto& r : s3.Log()) {
    object_puts += r.key.find("/packs/") != std::string::npos;
    manifest_puts += r.key == victim;
  }
  CHECK(manifest_puts == 3);
  CHECK(object_puts == 2);  // resumed at the failed step: the object was not sent again
  std::vector<FailedJob> failed = sink.Failed();
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].attempts == 3);
  CHECK(failed[0].last_error.error.code == "SlowDown");
}

TEST_CASE("Sink: a permanent error is tried once, retry and drop work one by one") {
  MemoryObjectStore s3;
  bool deny = true;
  s3.SetFault([&](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
    if (deny) return Permanent();
    return std::nullopt;
  });
  Sink sink(s3, kPrefix, {});
  sink.Submit(MakePack(0, 1));
  sink.Submit(MakePack(1, 1));
  DrainReport r = sink.Drain();
  CHECK(r.failed == 2);
  CHECK(s3.Count("PUT") == 2);
  std::vector<FailedJob> failed = sink.Failed();
  REQUIRE(failed.size() == 2);
  deny = false;
  CHECK(sink.Retry(failed[0].id));
  CHECK_FALSE(sink.Retry(failed[0].id));  // no longer failed
  CHECK(sink.Drop(failed[1].id));
  CHECK_FALSE(sink.Drop(12345));
  DrainReport again = sink.Drain();
  CHECK(again.uploaded == 1);
  CHECK(sink.Failed().empty());
  SinkStats st = sink.Stats();
  CHECK(st.uploaded == 1);
  CHECK(st.dropped == 1);
  CHECK(st.bytes_held == 0);
}

TEST_CASE("Sink: 1,000 jobs at 30% injected faults: submitted = uploaded + failed") {
  MemoryObjectStore s3;
  std::mt19937 rng(20261129);
  std::map<std::string, int> permanent_keys;
  int tried_after_permanent = 0;
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    tried_after_permanent += permanent_keys.count(r.key);
    if (r.verb != "PUT" || std::uniform_real_distribution<>(0, 1)(rng) >= 0.3) return std::nullopt;
    if (std::uniform_int_distribution<>(0, 9)(rng) == 0) {
      permanent_keys[r.key]++;
      return Permanent();
    }
    return Temporary();
  });
  SinkLimits limits;
  limits.max_jobs = 1000;
  limits.concurrency = 1;  // the fake's RNG sequence stays replayable
  Sink sink(s3, kPrefix, limits);
  for (int i = 0; i < 1000; i++) {
    REQUIRE(sink.Submit(MakePack(i, 1, 64)).admission == Admission::kAccepted);
  }
  DrainReport r = sink.Drain(10);
  SinkStats st = sink.Stats();
  CHECK(r.pending == 0);
  CHECK(st.submitted == 1000);
  CHECK(st.uploaded + sink.Failed().size() == 1000);
  CHECK(sink.Failed().size() > 0);
  std::map<std::string, int> puts;
  for (const auto& q : s3.Log()) puts[q.key]++;
  for (const auto& [key, n] : puts) CHECK(n <= 3);
  CHECK(permanent_keys.size() > 0);
  CHECK(tried_after_permanent == 0);  // a permanent error is never retried
  for (const FailedJob& f : sink.Failed()) {
    bool permanent = f.last_error.error.kind == ObjectErrorKind::kPermanent;
    if (!permanent) CHECK(f.attempts == 3);  // temporary: exhausted, never a 4th try
    CHECK(f.attempts <= 3);
  }
  CHECK(s3.Count("DELETE") == 0);
  MESSAGE("sink: submitted=1000 uploaded=" << st.uploaded << " failed=" << sink.Failed().size()
                                           << " requests=" << st.requests);
}

}  // namespace gpucache::cold
