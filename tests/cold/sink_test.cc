#include "cold/sink.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "cold/locator.h"
#include "tests/cold/cold_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;

namespace {
ObjectError Temporary() { return {ObjectErrorKind::kTemporary, 503, "SlowDown", "", true}; }
ObjectError Permanent() { return {ObjectErrorKind::kPermanent, 403, "AccessDenied", ""}; }
// Three attempts with backoffs of milliseconds, and no background re-drive: tests stay fast.
SinkLimits Fast(int attempts = 3) {
  SinkLimits l;
  l.max_attempts = attempts;
  l.backoff_base_ms = 2;
  l.backoff_max_ms = 8;
  l.redrive_interval_ms = 0;
  return l;
}
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
  SinkLimits limits = Fast();
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

TEST_CASE("Sink: temporary errors retry after a backoff, three attempts in all") {
  MemoryObjectStore s3;
  std::string victim;
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb == "PUT" && r.key == victim) return Temporary();
    return std::nullopt;
  });
  Sink sink(s3, kPrefix, Fast());
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
  CHECK(rest.newly_failed == 1);
  CHECK(rest.failed_now == 1);
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
  Sink sink(s3, kPrefix, Fast());
  sink.Submit(MakePack(0, 1));
  sink.Submit(MakePack(1, 1));
  DrainReport r = sink.Drain();
  CHECK(r.newly_failed == 2);
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
  SinkLimits limits = Fast();
  limits.max_jobs = 1000;
  limits.concurrency = 1;  // the fake's RNG sequence stays replayable
  Sink sink(s3, kPrefix, limits);
  for (int i = 0; i < 1000; i++) {
    REQUIRE(sink.Submit(MakePack(i, 1, 64)).admission == Admission::kAccepted);
  }
  DrainReport r = sink.Drain();
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
  CHECK(st.Balanced());
  MESSAGE("sink: submitted=1000 uploaded=" << st.uploaded << " failed=" << sink.Failed().size()
                                           << " requests=" << st.requests);
}

TEST_CASE("Sink: attempts are spaced by an exponential backoff, each at least half its step") {
  MemoryObjectStore s3;
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> tries;
  s3.SetFault([&](const MemoryObjectStore::Request& r) -> std::optional<ObjectError> {
    if (r.verb != "PUT") return std::nullopt;
    tries.push_back(Clock::now());
    return Temporary();
  });
  SinkLimits limits = Fast(4);
  limits.backoff_base_ms = 40;
  limits.backoff_max_ms = 100;
  Sink sink(s3, kPrefix, limits);
  sink.Submit(MakePack(0, 1));
  DrainReport r = sink.Drain();
  REQUIRE(tries.size() == 4);
  CHECK(r.newly_failed == 1);
  // Steps 40, 80, 100 (capped) ms; each delay is drawn from [step/2, step]. Lower bounds only:
  // a slow machine can only make the gaps longer.
  const int min_gap_ms[] = {20, 40, 50};
  for (int i = 0; i < 3; i++) {
    auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(tries[i + 1] - tries[i]);
    CAPTURE(i);
    CHECK(gap.count() >= min_gap_ms[i]);
  }
}

TEST_CASE("Sink: a job backing off is left pending by a round, not attempted early") {
  MemoryObjectStore s3;
  int puts = 0;
  s3.SetFault([&](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
    puts++;
    return Temporary();
  });
  SinkLimits limits = Fast();
  limits.backoff_base_ms = limits.backoff_max_ms = 60'000;  // a minute: never due in this test
  Sink sink(s3, kPrefix, limits);
  sink.Submit(MakePack(0, 1));
  CHECK(sink.DrainRound().requeued == 1);
  DrainReport again = sink.DrainRound();
  CHECK(again.attempted == 0);
  CHECK(again.pending == 1);
  CHECK(puts == 1);
}

TEST_CASE("Sink: an outage that ends heals through Redrive, without an operator") {
  MemoryObjectStore s3;
  std::atomic<bool> outage{true};
  s3.SetFault([&](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
    if (outage) return Temporary();
    return std::nullopt;
  });
  SinkLimits limits = Fast();
  limits.redrive_interval_ms = 1000;  // long enough that "not yet" below is not a race
  Sink sink(s3, kPrefix, limits);
  for (int i = 0; i < 20; i++) REQUIRE(sink.Submit(MakePack(i, 2, 256)).admission == Admission::kAccepted);
  DrainReport during = sink.Drain();
  CHECK(during.failed_now == 20);  // every job exhausted its attempts during the outage
  CHECK(sink.Stats().Balanced());
  CHECK(sink.Redrive() == 0);  // not yet: each job waits redrive_interval after failing
  outage = false;
  // What the tier's timer does: re-drive what is due, then drain.
  for (int tick = 0; tick < 1000 && sink.Stats().uploaded < 20; tick++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sink.Redrive();
    sink.Drain();
  }
  SinkStats st = sink.Stats();
  CHECK(st.uploaded == 20);
  CHECK(st.failed_now == 0);
  CHECK(st.redriven == 20);
  CHECK(st.retried == 0);  // nobody ran `cold retry`
  CHECK(st.failed_entries == 20);
  CHECK(st.Balanced());
}

TEST_CASE("Sink: a permanent failure is not re-driven, it waits for an operator") {
  MemoryObjectStore s3;
  s3.SetFault([&](const MemoryObjectStore::Request&) { return std::optional<ObjectError>(Permanent()); });
  SinkLimits limits = Fast();
  limits.redrive_interval_ms = 1;
  Sink sink(s3, kPrefix, limits);
  sink.Submit(MakePack(0, 1));
  sink.Drain();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(sink.Redrive() == 0);
  CHECK(sink.Failed().size() == 1);
}

TEST_CASE("Sink: Redrive moves at most redrive_batch jobs per call") {
  MemoryObjectStore s3;
  bool down = true;
  s3.SetFault([&](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
    if (down) return Temporary();
    return std::nullopt;
  });
  SinkLimits limits = Fast(1);
  limits.redrive_interval_ms = 1;
  limits.redrive_batch = 3;
  Sink sink(s3, kPrefix, limits);
  for (int i = 0; i < 10; i++) sink.Submit(MakePack(i, 1, 64));
  sink.Drain();
  REQUIRE(sink.Failed().size() == 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(sink.Redrive() == 3);
  CHECK(sink.Stats().pending == 3);
  CHECK(sink.Stats().Balanced());
}

TEST_CASE("Sink: submitted = uploaded + pending + in_flight + failed_now + dropped at every moment") {
  MemoryObjectStore s3;
  std::mt19937 rng(7);
  std::atomic<bool> faults{true};
  s3.SetFault([&](const MemoryObjectStore::Request&) -> std::optional<ObjectError> {
    if (!faults || std::uniform_real_distribution<>(0, 1)(rng) >= 0.3) return std::nullopt;
    return Temporary();
  });
  SinkLimits limits = Fast(2);
  limits.max_jobs = 1000;
  limits.concurrency = 8;
  limits.redrive_interval_ms = 1;
  Sink sink(s3, kPrefix, limits);
  std::atomic<bool> done{false};
  std::atomic<size_t> samples{0}, unbalanced{0};
  std::thread watcher([&] {  // samples the counters while everything below moves jobs around
    while (!done) {
      unbalanced += !sink.Stats().Balanced();
      samples++;
    }
  });
  std::thread operator_([&] {  // an operator dropping some failed jobs meanwhile
    for (int i = 0; i < 50 && !done; i++) {
      auto failed = sink.Failed();
      if (!failed.empty() && i % 5 == 0) sink.Drop(failed.front().id);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int i = 0; i < 1000; i++) REQUIRE(sink.Submit(MakePack(i, 1, 64)).admission == Admission::kAccepted);
  for (int tick = 0; tick < 20; tick++) {
    sink.Drain(3);
    sink.Redrive();
  }
  operator_.join();
  faults = false;
  for (int tick = 0; tick < 200; tick++) {
    SinkStats st = sink.Stats();
    if (st.pending + st.failed_now == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    sink.Redrive();
    sink.Drain();
  }
  done = true;
  watcher.join();
  SinkStats st = sink.Stats();
  MESSAGE("sink identity: " << samples.load() << " samples, uploaded=" << st.uploaded << " dropped="
          << st.dropped << " failed_entries=" << st.failed_entries << " redriven=" << st.redriven);
  CHECK(samples > 0);
  CHECK(unbalanced == 0);
  CHECK(st.failed_entries > 0);  // the faults did fail jobs, and re-drives healed them
  CHECK(st.uploaded + st.dropped == 1000);
  CHECK(st.failed_now == 0);
  CHECK(st.Balanced());
}

}  // namespace gpucache::cold
