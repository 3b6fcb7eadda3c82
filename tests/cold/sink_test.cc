#include "cold/sink.h"

#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <chrono>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "cold/locator.h"
#include "tests/cold/cold_test_util.h"
#include "tests/cold/sink_test_util.h"
#include "tests/support/memory_object_store.h"

namespace gpucache::cold {
using namespace testing;


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

namespace {
// Forwards to a MemoryObjectStore; each pack object PUT waits (up to 5 s) until `target`
// of them are in flight at once, and the most seen together is recorded. A sink that
// uploads one job at a time sees 1 (after the waits time out).
class GateStore final : public ForwardingObjectStore {
 public:
  GateStore(MemoryObjectStore& inner, int target) : ForwardingObjectStore(inner), target_(target) {}
  int max_in_flight() const { return max_; }
  void Release() {
    std::lock_guard l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  ObjectResult<Done> Put(std::string_view key, std::span<const uint8_t> body) override {
    if (key.find("/packs/") != std::string_view::npos) {
      std::unique_lock l(mu_);
      max_ = std::max(max_, ++in_flight_);
      cv_.notify_all();
      cv_.wait_for(l, std::chrono::seconds(10), [&] { return in_flight_ >= target_ || released_; });
      released_ = true;  // the gate opens once: later objects pass straight through
      cv_.notify_all();
      in_flight_--;
    }
    return inner_.Put(key, body);
  }

 private:
  const int target_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0, max_ = 0;
  bool released_ = false;
};
}  // namespace

TEST_CASE("Sink: DrainWhile keeps `concurrency` jobs in flight and takes jobs submitted meanwhile") {
  MemoryObjectStore s3;
  GateStore gate(s3, 4);
  SinkLimits limits = Fast();
  limits.concurrency = 4;
  Sink sink(gate, kPrefix, limits);
  std::atomic<bool> more{true};
  DrainReport r;
  std::thread drainer([&] { r = sink.DrainWhile([&] { return more.load(); }); });
  // Submitted one by one while the drain runs, as a backfill does while it reads.
  std::vector<PackedPair> copies;
  for (int i = 0; i < 6; i++) {
    PackedPair p = MakePack(10 * i, 2);
    copies.push_back(p);
    REQUIRE(sink.Submit(std::move(p)).admission == Admission::kAccepted);
  }
  more = false;
  drainer.join();
  CHECK(gate.max_in_flight() == 4);  // four object uploads overlapped, not one after another
  CHECK(r.uploaded == 6);
  CHECK(r.pending == 0);
  auto objects = s3.Objects();
  for (const PackedPair& p : copies) {
    CHECK(objects.at(p.object_key) == p.object);
    for (const ManifestEntry& e : p.decoded.entries) CHECK(objects.count(LocatorKey(kPrefix, e.address)) == 1);
  }
  SinkStats st = sink.Stats();
  CHECK(st.uploaded == 6);
  CHECK(st.Balanced());
}

TEST_CASE("Sink: DrainWhile leaves a job that backs off pending, for Drain") {
  MemoryObjectStore s3;
  int faults = 1;
  s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "PUT" && faults > 0) return faults--, Temporary();
    return std::nullopt;
  });
  SinkLimits limits = Fast();
  limits.backoff_base_ms = limits.backoff_max_ms = 200;
  Sink sink(s3, kPrefix, limits);
  REQUIRE(sink.Submit(MakePack(0, 1)).admission == Admission::kAccepted);
  DrainReport r = sink.DrainWhile([] { return false; });
  CHECK(r.requeued == 1);
  CHECK(r.pending == 1);
  CHECK(sink.Stats().Balanced());
  CHECK(sink.Drain().uploaded == 1);
  CHECK(sink.Stats().uploaded == 1);
}

TEST_CASE("Sink: Drain waits for jobs another drain holds in flight") {
  // The tier's background round can take the jobs a pack submitted; the pack's own Drain
  // then saw nothing pending and its reply said "complete" while uploads were still running.
  MemoryObjectStore s3;
  GateStore gate(s3, 2);  // holds the object PUT until released (its target is never reached)
  Sink sink(gate, kPrefix, Fast());
  REQUIRE(sink.Submit(MakePack(0, 1)).admission == Admission::kAccepted);
  std::thread background([&] { sink.DrainRound(); });
  while (sink.Stats().in_flight == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> released{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    released = true;
    gate.Release();
  });
  sink.Drain();
  CHECK(released.load());  // it returned only after the other drain's upload finished
  SinkStats st = sink.Stats();
  CHECK(st.in_flight == 0);
  CHECK(st.uploaded == 1);
  opener.join();
  background.join();
}

// Regression (review, 2026-12-06): a drain round attempted every due job however long the
// daemon had been stopping (256 jobs at 4 at a time, 30 s each against a stalled S3), past
// systemd's TimeoutStopSec: the daemon was killed before the hot store wrote its INDEX.
TEST_CASE("Sink: Stop ends a round after the step in flight, and what it did not finish stays pending") {
  MemoryObjectStore s3;
  Sink* sink = nullptr;
  s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb != "PUT" || q.key.find("/manifests/") == std::string::npos) return std::nullopt;
    sink->Stop();  // the daemon stops while the first job's manifest is on its way ...
    return ObjectError{ObjectErrorKind::kTemporary, 0, "Stopped", "", true};  // ... and aborts it
  });
  SinkLimits limits = Fast();
  limits.concurrency = 1;
  Sink s(s3, kPrefix, limits);
  sink = &s;
  for (int i = 0; i < 5; i++) REQUIRE(s.Submit(MakePack(10 * i, 2)).admission == Admission::kAccepted);
  DrainReport r = s.DrainRound();
  CHECK(s3.Count("PUT") == 2);  // the first job's object and manifest: no other job started
  CHECK(r.newly_failed == 0);   // cut short by the stop: not the job's failure
  SinkStats st = s.Stats();
  CHECK(st.pending == 5);
  CHECK(st.in_flight == 0);
  CHECK(st.failed_now == 0);
  CHECK(st.Balanced());
  CHECK(s.Drain().attempted == 0);  // nothing is started after Stop
  CHECK(s.DrainWhile([] { return true; }).attempted == 0);
  CHECK(s3.Count("PUT") == 2);
  CHECK(s.Stats().Balanced());
}

TEST_CASE("Sink: Stop ends a Drain that waits out a job's backoff") {
  MemoryObjectStore s3;
  int faults = 1;
  s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "PUT" && faults > 0) return faults--, Temporary();
    return std::nullopt;
  });
  SinkLimits limits = Fast();
  limits.backoff_base_ms = limits.backoff_max_ms = 120'000;  // due again in a minute or two
  Sink sink(s3, kPrefix, limits);
  REQUIRE(sink.Submit(MakePack(0, 1)).admission == Admission::kAccepted);
  REQUIRE(sink.DrainRound().requeued == 1);
  auto drain = std::async(std::launch::async, [&] { return sink.Drain(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // (let it start waiting)
  sink.Stop();
  REQUIRE(drain.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(drain.get().attempted == 0);
  CHECK(sink.Stats().pending == 1);
  CHECK(sink.Stats().Balanced());
}

TEST_CASE("Sink: a manifest is held from admission until its job is uploaded or dropped") {
  MemoryObjectStore s3;
  bool refuse = true;
  s3.SetFault([&](const MemoryObjectStore::Request& q) -> std::optional<ObjectError> {
    if (q.verb == "PUT" && q.key.find("/locators/") != std::string::npos && refuse) return Permanent();
    return std::nullopt;
  });
  Sink sink(s3, kPrefix, Fast());
  PackedPair a = MakePack(0, 1), b = MakePack(10, 1);
  const std::string ka = a.manifest_key, kb = b.manifest_key;
  REQUIRE(sink.Submit(std::move(a)).admission == Admission::kAccepted);
  REQUIRE(sink.Submit(std::move(b)).admission == Admission::kAccepted);
  CHECK(sink.Holds(ka));
  sink.Drain();  // both fail at their locator, after their manifests went up
  REQUIRE(sink.Failed().size() == 2);
  CHECK(sink.Holds(ka));
  CHECK(sink.Holds(kb));
  REQUIRE(sink.Drop(sink.Failed()[0].id));
  refuse = false;
  REQUIRE(sink.Retry(sink.Failed()[0].id));
  CHECK(sink.Drain().uploaded == 1);
  CHECK_FALSE(sink.Holds(ka));
  CHECK_FALSE(sink.Holds(kb));
}

}  // namespace gpucache::cold
