// The cold sink: an asynchronous, bounded queue of pack uploads (docs/cold-tier.md, "The sink").
//
// Admission: a PackedPair is validated (ValidatePair) before it is admitted, and refused when
// the jobs or bytes held (pending + in flight + failed; they share the limits) would exceed
// the limits. Nothing is ever admitted half.
//
// Draining: each round takes the pending jobs that are due and attempts each exactly once.
// A job uploads the object, then (with a retention) the manifest's retention record, then the
// manifest, then one locator per block; a refill finds a block only through its locator, so
// nothing is visible before everything it needs is, and a manifest is never visible without
// its retention record (a reclaim could delete it at once). A job resumes at the step that
// failed (the record is retried like every other step). A temporary error sends the job back to the queue, due
// again after an exponential backoff with jitter (backoff_base_ms, doubling per attempt up to
// backoff_max_ms, each delay drawn from [d/2, d]), until it has been attempted `max_attempts`
// times; a permanent or exhausted error moves it to the failed queue, whose entries can be
// listed, retried and dropped one by one.
//
// Healing: Redrive() (the tier calls it on its timer) moves failed jobs whose last error was
// temporary back to the queue with a fresh attempt count, at most `redrive_batch` per call and
// each job no sooner than redrive_interval_ms * 2^min(redrives, 4) after it failed, so an
// outage that ends heals without an operator and a lasting one costs a bounded request rate.
// A permanent error (403, other 4xx) waits for an operator (Retry or Drop).
//
// Stopping: after Stop() no job is started or continued: a drain returns once the steps in
// flight end (the daemon then aborts them: S3Client::AbortTransfers), and every job it did
// not finish goes back to the queue where it was, to be lost with the daemon as after a crash
// (its blocks have no locator; the next backfill packs them again).
//
// Accounting: at every moment, under one lock,
//   submitted = uploaded + pending + in_flight + failed_now + dropped
// (Stats() reads all of them at once; jobs refused at admission are counted apart).
//
// Orphan sweeps: a job that comes back to its manifest longer than SinkLimits::object_fresh_ms
// (10 minutes) after its object went up (a backoff, a wait in the failed queue until an
// operator's retry) puts the object again first. An orphan sweep (ColdOps::SweepOrphans, an
// hour at the least) deletes only objects no manifest names that were written longer ago, so
// it never takes the object of a job that will still name it.
//
// The sink never deletes an object. After an ambiguous failure (a PUT that may have reached
// the server) the object may be referenced by a manifest that is already visible, so the only
// safe reaction is to leave it; reclaiming orphans is an explicit operation (cold/ops.h) that
// first proves ownership and the absence of live references.
//
// Thread safety: every method may be called from any thread; one drain runs at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cold/locator_locks.h"
#include "cold/object_store.h"
#include "cold/pack.h"
#include "store/mutex.h"
#include "common/cold_options.h"  // SinkLimits

namespace gpucache::cold {

enum class Admission : uint8_t { kAccepted, kInvalid, kFull, kReclaiming };
std::string_view ToString(Admission a);

struct SubmitOutcome {
  Admission admission = Admission::kAccepted;
  uint64_t job_id = 0;
  std::string detail;  // why it was refused
};

struct JobError {
  uint64_t job_id = 0;
  std::string step;  // "object", "retention", "manifest", "locator"
  ObjectError error;
  std::string Describe() const;
};

struct FailedJob {
  uint64_t id = 0;
  std::string manifest_key;
  size_t blocks = 0;
  uint64_t bytes = 0;
  int attempts = 0;
  JobError last_error;
};

struct DrainReport {
  size_t rounds = 0;
  size_t attempted = 0;  // job attempts made
  size_t uploaded = 0;   // jobs fully uploaded
  size_t requeued = 0;   // temporary errors sent back to the queue (with a backoff)
  size_t newly_failed = 0;  // jobs moved to the failed queue by this drain
  size_t stale_seals = 0;   // jobs dropped by this drain: sealed under a key no longer current
  size_t pending = 0;    // after the drain
  size_t failed_now = 0;  // the failed queue after the drain
  std::optional<JobError> first_error;  // the first job error seen, if any
  // The first error of a job requeued, and of a job moved to the failed queue: the log lines
  // of each kind (daemon/cold_upload_log.h) name their own, not a temporary error for a
  // permanent failure or the other way round.
  std::optional<JobError> first_requeued_error, first_failed_error;
};

// Adds the counts of `r` to `total` (pending and failed_now are taken from `r`: they are
// states, not counts); the first error stays the first.
void Accumulate(DrainReport& total, const DrainReport& r);

struct SinkStats {
  uint64_t submitted = 0;  // admitted jobs
  uint64_t refused = 0;    // invalid or over the limits
  uint64_t uploaded = 0;
  uint64_t failed_entries = 0;  // entries into the failed queue (a re-driven job can enter twice)
  uint64_t redriven = 0;   // failed jobs moved back to the queue by Redrive (not by an operator)
  uint64_t retried = 0;    // failed jobs moved back by an operator (Retry)
  uint64_t dropped = 0;    // removed from the failed queue by an operator, or stale (below)
  uint64_t stale_seals = 0;  // dropped for a seal under a key no longer current (SetSealKeys)
  uint64_t requests = 0;   // object store requests made
  size_t pending = 0;
  size_t in_flight = 0;
  size_t failed_now = 0;
  uint64_t bytes_held = 0;
  // submitted = uploaded + pending + in_flight + failed_now + dropped, exactly.
  bool Balanced() const { return submitted == uploaded + pending + in_flight + failed_now + dropped; }
};

class Sink {
 public:
  // `store` is borrowed and must outlive the sink. Each locator PUT holds its key's lock in
  // `locks`: share them with the ColdOps that reseals and reclaims (cold/locator_locks.h).
  // `retention_ns` > 0: each manifest is kept that long from just before it is uploaded.
  Sink(ObjectStore& store, std::string prefix, SinkLimits limits,
       std::shared_ptr<LocatorLocks> locks = std::make_shared<LocatorLocks>(),
       uint64_t retention_ns = 0);
  ~Sink();

  // Called on the draining thread after each job is fully uploaded (e.g. to record retention).
  // REQUIRES: set before the first drain.
  void SetUploadedHook(std::function<void(const PackedPair&)> hook) { uploaded_hook_ = std::move(hook); }
  // The keyring in use: a job whose seals are not under its current key is dropped (counted in
  // stale_seals) before its manifest and locators go up. A pack is sealed when it is built; uploaded after
  // a rotation (a job pending or failed across it), it carried the old key, which `cold
  // reseal` never saw (it reads the bucket) and the operator then removed: its blocks were
  // "unknown-key" misses that `cold pack` took for cold (review, 2026-12-07). Dropped so, the
  // blocks have no locator and the next pack packs them again, under the current key.
  // REQUIRES: set before the first drain.
  void SetSealKeys(std::shared_ptr<SealKeys> keys) { seal_keys_ = std::move(keys); }

  SubmitOutcome Submit(PackedPair pair) { return TrySubmit(pair); }
  // As Submit, but `pair` is moved from only when it is accepted (a full sink leaves it to
  // the caller, who may wait for room and try again).
  SubmitOutcome TrySubmit(PackedPair& pair);
  // One round over the pending jobs that are due now (a job backing off is left pending).
  DrainReport DrainRound();
  // Rounds until nothing is pending or in flight (it waits for another drain's jobs, which
  // may come back pending) or `max_rounds` rounds ran; between rounds it sleeps until the
  // next pending job is due (bounded by backoff_max_ms).
  DrainReport Drain(size_t max_rounds = 10000);
  // Streams: `concurrency` workers each take the next due job as soon as they finish one
  // (a round waits for its slowest job before taking the jobs submitted meanwhile), and wait
  // for new submissions while `more()` is true. Returns once `more()` is false and no job is
  // due; jobs backing off stay pending (Drain takes them). Used while a backfill reads.
  DrainReport DrainWhile(const std::function<bool()>& more);
  // Moves due, temporarily failed jobs back to the queue (see "Healing" above). Returns how many.
  size_t Redrive();
  // The daemon is stopping (see "Stopping" above). Irreversible; returns at once.
  void Stop();

  // Whether a job of this manifest is held (pending, in flight or failed): its steps may still
  // write objects that name it. A reclaim must not delete it meanwhile (ColdTier::Reclaim).
  bool Holds(const std::string& manifest_key) const;
  // Whether a job held (pending, in flight or failed) packs the block at `address`: its steps
  // may still write a locator for it (ColdTier::WithdrawInvalidated waits for them).
  bool HoldsBlock(const BlockAddress& address) const;
  // A reclaim on this node is about to delete the pack object `object_key`: false (nothing
  // changed) while a job uploading that object is held; else, until EndReclaim, a pack of the
  // same bytes (the same blocks packed again, which gives the same key) is refused
  // (kReclaiming), so that the reclaim never deletes an object a new manifest names (review,
  // 2026-12-07: a `cold pack` run beside a reclaim re-uploaded the pack its locators deletes had
  // made the blocks leave, and the reclaim then deleted it under the new manifest).
  bool BeginReclaim(const std::string& object_key);
  void EndReclaim(const std::string& object_key);

  std::vector<FailedJob> Failed() const;
  // Moves a failed job back to the pending tail with a fresh attempt count. False if unknown.
  bool Retry(uint64_t job_id);
  bool Drop(uint64_t job_id);
  SinkStats Stats() const;

 private:
  struct Job;
  // kStopped: cut short by Stop(), back to the queue as it was (not the job's failure).
  // kStale: sealed under a key no longer current (StaleSeal): dropped, never retried.
  enum class Outcome : uint8_t { kUploaded, kRequeue, kFail, kStopped, kStale };
  Outcome Attempt(Job& job);
  // The job's next step, one PUT; `step` is named for a JobError.
  ObjectResult<Done> Upload(const Job& job, std::string& step);
  void Settle(std::unique_ptr<Job> job, Outcome outcome, DrainReport& report);
  std::chrono::milliseconds Backoff(int attempts) REQUIRES(mu_);
  void Release(const PackedPair& pair) REQUIRES(mu_);  // its job left: uploaded or dropped
  std::chrono::steady_clock::time_point NextDue() const;  // of the pending jobs; max() if none
  // The first pending job that is due, now in flight; null if none (after waiting up to
  // `wait` for a submission).
  std::unique_ptr<Job> TakeDue(std::chrono::milliseconds wait);
  // Jobs a round took and, stopping, never attempted: back to the queue.
  void Unclaim(std::deque<std::unique_ptr<Job>>& jobs);

  // Why `job`'s seals may not go up now ("" when they may): not under the current key.
  std::string StaleSeal(const Job& job) const;

  ObjectStore& store_;
  std::shared_ptr<SealKeys> seal_keys_;  // null: any key (tests of the sink alone)
  const std::string prefix_;
  const SinkLimits limits_;
  const std::shared_ptr<LocatorLocks> locks_;
  const uint64_t retention_ns_;
  Mutex drain_mu_;  // one drain at a time; never held with mu_ across I/O
  mutable Mutex mu_;
  std::condition_variable_any submitted_;  // a job entered the queue
  std::condition_variable_any stopped_;    // Stop() was called
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::deque<std::unique_ptr<Job>> pending_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Job>> failed_ GUARDED_BY(mu_);
  size_t in_flight_ GUARDED_BY(mu_) = 0;
  std::multiset<std::string> held_manifests_ GUARDED_BY(mu_);  // of every job admitted, until uploaded or dropped
  std::multiset<std::string> held_objects_ GUARDED_BY(mu_);    // their pack objects' keys, as long
  std::multiset<BlockAddress> held_blocks_ GUARDED_BY(mu_);    // the blocks they pack, as long
  std::multiset<std::string> reclaiming_objects_ GUARDED_BY(mu_);  // BeginReclaim .. EndReclaim
  SinkStats stats_ GUARDED_BY(mu_);
  std::mt19937_64 jitter_ GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::function<void(const PackedPair&)> uploaded_hook_;
};

}  // namespace gpucache::cold
