#include "cold/sink.h"

#include <thread>

#include "cold/manifest.h"

namespace gpucache::cold {

using Clock = std::chrono::steady_clock;

namespace {
// A job's steps, in upload order; the locators follow, one per manifest entry.
constexpr size_t kObjectStep = 0, kRetentionStep = 1, kManifestStep = 2, kFirstLocatorStep = 3;

uint64_t NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::span<const uint8_t> BytesOf(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
}  // namespace

struct Sink::Job {
  uint64_t id = 0;
  PackedPair pair;
  int attempts = 0;
  int redrives = 0;             // times Redrive() moved it back from the failed queue
  Clock::time_point due{};      // not attempted before this (backoff)
  Clock::time_point redrive_at{};  // in the failed queue: not re-driven before this
  size_t next_step = kObjectStep;  // then retention, manifest, locator of entry i at 3 + i
  bool retention_again = false;    // the retention step runs again, after a failed manifest
  Clock::time_point object_up{};   // when its object step last succeeded
  JobError last_error;
  size_t steps() const { return kFirstLocatorStep + pair.decoded.entries.size(); }
};

std::string_view ToString(Admission a) {
  switch (a) {
    case Admission::kAccepted: return "accepted";
    case Admission::kInvalid: return "invalid";
    case Admission::kFull: return "full";
    case Admission::kReclaiming: return "reclaiming";
  }
  return "?";
}

std::string JobError::Describe() const {
  std::string s = "job " + std::to_string(job_id) + " " + step + ": " +
                  std::string(ToString(error.kind));
  if (error.http_status) s += " HTTP " + std::to_string(error.http_status);
  if (!error.code.empty()) s += " " + error.code;
  if (!error.message.empty()) s += " (" + error.message + ")";
  return s;
}

Sink::Sink(ObjectStore& store, std::string prefix, SinkLimits limits,
           std::shared_ptr<LocatorLocks> locks, uint64_t retention_ns)
    : store_(store),
      prefix_(std::move(prefix)),
      limits_(limits),
      locks_(std::move(locks)),
      retention_ns_(retention_ns),
      jitter_(std::random_device{}()) {}

Sink::~Sink() = default;

SubmitOutcome Sink::TrySubmit(PackedPair& pair) {
  SubmitOutcome out;
  if (std::string why = ValidatePair(prefix_, pair); !why.empty()) {
    MutexLock lock(mu_);
    stats_.refused++;
    return {Admission::kInvalid, 0, why};
  }
  MutexLock lock(mu_);
  if (reclaiming_objects_.count(pair.object_key) > 0) {
    stats_.refused++;
    return {Admission::kReclaiming, 0,
            pair.object_key + " is being reclaimed on this node: its blocks are packed again by the next pack"};
  }
  size_t jobs = pending_.size() + failed_.size() + in_flight_;
  if (jobs + 1 > limits_.max_jobs || stats_.bytes_held + pair.bytes() > limits_.max_bytes) {
    stats_.refused++;
    return {Admission::kFull, 0, "sink full: " + std::to_string(jobs) + " jobs, " +
                                     std::to_string(stats_.bytes_held) + " bytes held"};
  }
  auto job = std::make_unique<Job>();
  job->id = next_id_++;
  stats_.bytes_held += pair.bytes();
  job->pair = std::move(pair);
  held_manifests_.insert(job->pair.manifest_key);
  held_objects_.insert(job->pair.object_key);
  for (const ManifestEntry& e : job->pair.decoded.entries) held_blocks_.insert(e.address);
  out.job_id = job->id;
  pending_.push_back(std::move(job));
  stats_.submitted++;
  submitted_.notify_one();
  return out;
}

// One step's PUT. The object's SHA-256 is already known (its key; checked at admission): not
// hashed again. The retention deadline counts from this attempt, just before the manifest is
// visible, however long the job waited. A locator is written under its key's lock, so a
// reseal or reclaim that read the older locator finishes its write first and this one
// replaces it (LocatorLocks).
ObjectResult<Done> Sink::Upload(const Job& job, std::string& step) {
  const PackedPair& p = job.pair;
  switch (job.next_step) {
    case kObjectStep:
      step = "object";
      return store_.PutHashed(p.object_key, p.object, ToHex(p.decoded.object_digest));
    case kRetentionStep: {
      step = "retention";
      const std::string key = RetentionKey(prefix_, p.manifest_digest);
      uint64_t until = NowUnixNs() + retention_ns_;
      if (job.retention_again) {
        // Again after an earlier attempt: a manifest PUT that failed ambiguously may be
        // visible, and an operator may have retained it longer meanwhile (cold.retain): a
        // record already there is never shortened.
        auto had = store_.Get(key, 128);
        if (!had.ok() && had.error().kind != ObjectErrorKind::kNotFound) return had.error();
        if (had.ok()) {
          uint64_t kept = DecodeRetention({reinterpret_cast<const char*>(had.value().data()), had.value().size()});
          if (kept >= until) return Done{};
        }
      }
      return store_.Put(key, BytesOf(EncodeRetention(until)));
    }
    case kManifestStep:
      step = "manifest";
      return store_.Put(p.manifest_key, p.manifest);
  }
  size_t entry = job.next_step - kFirstLocatorStep;
  std::string key = LocatorKey(prefix_, p.decoded.entries[entry].address);
  step = "locator";
  MutexLock locator(locks_->For(key));
  return store_.Put(key, p.locators[entry]);
}

std::string Sink::StaleSeal(const Job& job) const {
  if (!seal_keys_) return "";
  const std::string current = seal_keys_->Get()->current();
  for (const TenantSeal& s : job.pair.decoded.seals) {
    if (s.seal.key_id != current) {
      return "sealed under key \"" + s.seal.key_id + "\", no longer the keyring's current key (\"" + current +
             "\"): dropped; the next cold pack packs its blocks again under the current key";
    }
  }
  return "";
}

// Runs the job's remaining steps once; stops at the first error. No lock held: I/O.
Sink::Outcome Sink::Attempt(Job& job) {
  job.attempts++;
  if (job.next_step <= kManifestStep) {  // nothing that names the seals is up yet
    if (std::string why = StaleSeal(job); !why.empty()) {
      job.last_error = JobError{job.id, "seal", ObjectError{ObjectErrorKind::kPermanent, 0, "StaleSeal", why}};
      return Outcome::kStale;
    }
  }
  // A job that stopped at its manifest writes its retention record again first: the deadline
  // counts from just before the manifest is visible, and an earlier attempt's (a backoff of
  // minutes, or days until an operator's retry) would make the manifest reclaimable at once.
  if (job.next_step == kManifestStep) job.retention_again = true;
  if (job.next_step > kObjectStep && job.next_step <= kManifestStep &&
      Clock::now() - job.object_up >= std::chrono::milliseconds(limits_.object_fresh_ms)) {
    job.next_step = kObjectStep;  // back after a long wait: the object goes up again first
  } else if (job.next_step == kManifestStep && retention_ns_ != 0) {
    job.next_step = kRetentionStep;
  }
  while (job.next_step < job.steps()) {
    if (stopping_) return Outcome::kStopped;  // between steps: the rest waits, as after a crash
    if (job.next_step == kRetentionStep && retention_ns_ == 0) {
      job.next_step++;  // no retention: no record
      continue;
    }
    std::string step;
    ObjectResult<Done> r = Upload(job, step);
    {
      MutexLock lock(mu_);
      stats_.requests++;
    }
    if (!r.ok()) {
      job.last_error = JobError{job.id, step, r.error()};
      if (stopping_) return Outcome::kStopped;  // most likely aborted by the stop itself
      bool temporary = r.error().kind == ObjectErrorKind::kTemporary;
      return temporary && job.attempts < limits_.max_attempts ? Outcome::kRequeue : Outcome::kFail;
    }
    if (job.next_step == kObjectStep) job.object_up = Clock::now();
    job.next_step++;
  }
  return Outcome::kUploaded;
}

// Exponential backoff with "equal jitter": d = base * 2^(attempts-1) capped at max, then a
// delay drawn from [d/2, d], so jobs that failed together do not all come back together.
std::chrono::milliseconds Sink::Backoff(int attempts) {
  uint64_t d = limits_.backoff_base_ms;
  for (int i = 1; i < attempts && d < limits_.backoff_max_ms; i++) d *= 2;
  d = std::min(d, limits_.backoff_max_ms);
  if (d == 0) return std::chrono::milliseconds(0);
  uint64_t half = d / 2;
  return std::chrono::milliseconds(half + std::uniform_int_distribution<uint64_t>(0, d - half)(jitter_));
}

void Sink::Settle(std::unique_ptr<Job> job, Outcome outcome, DrainReport& report) {
  MutexLock lock(mu_);
  in_flight_--;
  report.attempted++;
  if (outcome != Outcome::kUploaded && !report.first_error) report.first_error = job->last_error;
  switch (outcome) {
    case Outcome::kUploaded:
      report.uploaded++;
      stats_.uploaded++;
      stats_.bytes_held -= job->pair.bytes();
      Release(job->pair);
      break;
    case Outcome::kRequeue:
      report.requeued++;
      if (!report.first_requeued_error) report.first_requeued_error = job->last_error;
      job->due = Clock::now() + Backoff(job->attempts);
      pending_.push_back(std::move(job));
      break;
    case Outcome::kStopped:
      job->due = Clock::now();
      pending_.push_back(std::move(job));
      break;
    case Outcome::kStale:
      // Dropped at once: failed, it held the sink's room and its object until an operator
      // dropped it (review, 2026-12-07), and retried it failed again.
      report.stale_seals++;
      stats_.stale_seals++;
      stats_.dropped++;
      stats_.bytes_held -= job->pair.bytes();
      Release(job->pair);
      break;
    case Outcome::kFail: {
      report.newly_failed++;
      if (!report.first_failed_error) report.first_failed_error = job->last_error;
      stats_.failed_entries++;
      uint64_t ms = limits_.redrive_interval_ms << std::min(job->redrives, 4);
      job->redrive_at = Clock::now() + std::chrono::milliseconds(ms);
      failed_.push_back(std::move(job));
      break;
    }
  }
}

DrainReport Sink::DrainRound() {
  MutexLock drain(drain_mu_);
  std::deque<std::unique_ptr<Job>> round;
  {
    MutexLock lock(mu_);
    Clock::time_point now = Clock::now();
    std::deque<std::unique_ptr<Job>> waiting;
    for (auto& job : pending_) (job->due <= now ? round : waiting).push_back(std::move(job));
    pending_.swap(waiting);
    in_flight_ += round.size();
  }
  DrainReport report;
  report.rounds = 1;
  Mutex round_mu;  // guards `round` and `report` between the workers
  auto worker = [&] {
    for (;;) {
      std::unique_ptr<Job> job;
      {
        MutexLock lock(round_mu);
        if (round.empty() || stopping_) return;
        job = std::move(round.front());
        round.pop_front();
      }
      Outcome o = Attempt(*job);
      if (o == Outcome::kUploaded && uploaded_hook_) uploaded_hook_(job->pair);
      MutexLock lock(round_mu);
      Settle(std::move(job), o, report);
    }
  };
  size_t n = std::min<size_t>(limits_.concurrency, round.size());
  std::vector<std::thread> workers;
  for (size_t i = 1; i < n; i++) workers.emplace_back(worker);
  worker();
  for (std::thread& t : workers) t.join();
  Unclaim(round);
  MutexLock lock(mu_);
  report.pending = pending_.size();
  report.failed_now = failed_.size();
  return report;
}

void Sink::Unclaim(std::deque<std::unique_ptr<Job>>& jobs) {
  MutexLock lock(mu_);
  in_flight_ -= jobs.size();
  for (auto& job : jobs) pending_.push_back(std::move(job));
  jobs.clear();
}

void Sink::Stop() {
  stopping_ = true;
  MutexLock lock(mu_);  // a wait between its check and its sleep still hears the notify
  submitted_.notify_all();
  stopped_.notify_all();
}

std::unique_ptr<Sink::Job> Sink::TakeDue(std::chrono::milliseconds wait) {
  MutexLock lock(mu_);
  for (bool waited = false;; waited = true) {
    if (stopping_) return nullptr;
    Clock::time_point now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if ((*it)->due > now) continue;
      std::unique_ptr<Job> job = std::move(*it);
      pending_.erase(it);
      in_flight_++;
      return job;
    }
    if (waited || wait.count() == 0) return nullptr;
    submitted_.wait_for(mu_, wait);
  }
}

DrainReport Sink::DrainWhile(const std::function<bool()>& more) {
  MutexLock drain(drain_mu_);
  DrainReport report;
  report.rounds = 1;
  Mutex report_mu;
  auto worker = [&] {
    for (;;) {
      std::unique_ptr<Job> job = TakeDue(std::chrono::milliseconds(5));
      if (!job) {
        if (stopping_) return;
        if (more()) continue;
        job = TakeDue(std::chrono::milliseconds(0));  // submitted just before more() turned false
        if (!job) return;
      }
      Outcome o = Attempt(*job);
      if (o == Outcome::kUploaded && uploaded_hook_) uploaded_hook_(job->pair);
      MutexLock lock(report_mu);
      Settle(std::move(job), o, report);
    }
  };
  std::vector<std::thread> workers;
  for (int i = 1; i < limits_.concurrency; i++) workers.emplace_back(worker);
  worker();
  for (std::thread& t : workers) t.join();
  MutexLock lock(mu_);
  report.pending = pending_.size();
  report.failed_now = failed_.size();
  return report;
}

void Accumulate(DrainReport& total, const DrainReport& r) {
  total.rounds += r.rounds;
  total.attempted += r.attempted;
  total.uploaded += r.uploaded;
  total.requeued += r.requeued;
  total.newly_failed += r.newly_failed;
  total.stale_seals += r.stale_seals;
  total.pending = r.pending;
  total.failed_now = r.failed_now;
  if (!total.first_error) total.first_error = r.first_error;
  if (!total.first_requeued_error) total.first_requeued_error = r.first_requeued_error;
  if (!total.first_failed_error) total.first_failed_error = r.first_failed_error;
}

Clock::time_point Sink::NextDue() const {
  MutexLock lock(mu_);
  Clock::time_point next = Clock::time_point::max();
  for (const auto& job : pending_) next = std::min(next, job->due);
  return next;
}

DrainReport Sink::Drain(size_t max_rounds) {
  DrainReport total;
  for (size_t i = 0; i < max_rounds && !stopping_;) {
    Clock::time_point next = NextDue();
    if (next == Clock::time_point::max()) {
      // Nothing pending, but another drain (the tier's background round) may still hold jobs
      // in flight, and any of them may come back pending: wait for it, then look again.
      // (in_flight_ only changes under drain_mu_, so once we hold it nothing is in flight.)
      if (Stats().in_flight == 0) break;
      MutexLock wait_for_other_drain(drain_mu_);
      continue;
    }
    Clock::time_point latest = Clock::now() + std::chrono::milliseconds(limits_.backoff_max_ms);
    {
      MutexLock lock(mu_);  // a backoff may be 10 s: Stop() ends the wait
      stopped_.wait_until(mu_, std::min(next, latest), [this] { return stopping_.load(); });
    }
    DrainReport r = DrainRound();
    if (r.attempted == 0) continue;  // another drain took the due jobs
    i++;
    Accumulate(total, r);
  }
  MutexLock lock(mu_);
  total.pending = pending_.size();
  total.failed_now = failed_.size();
  return total;
}

size_t Sink::Redrive() {
  if (limits_.redrive_interval_ms == 0) return 0;
  MutexLock lock(mu_);
  Clock::time_point now = Clock::now();
  size_t moved = 0;
  for (auto it = failed_.begin(); it != failed_.end() && moved < limits_.redrive_batch;) {
    Job& job = **it;
    if (job.last_error.error.kind != ObjectErrorKind::kTemporary || job.redrive_at > now) {
      ++it;
      continue;
    }
    job.attempts = 0;
    job.redrives++;
    job.due = now;
    pending_.push_back(std::move(*it));
    it = failed_.erase(it);
    stats_.redriven++;
    moved++;
  }
  return moved;
}

void Sink::Release(const PackedPair& pair) {
  // One job's entries, not all.
  if (auto it = held_manifests_.find(pair.manifest_key); it != held_manifests_.end()) held_manifests_.erase(it);
  if (auto it = held_objects_.find(pair.object_key); it != held_objects_.end()) held_objects_.erase(it);
  for (const ManifestEntry& e : pair.decoded.entries) {
    if (auto it = held_blocks_.find(e.address); it != held_blocks_.end()) held_blocks_.erase(it);
  }
}

bool Sink::BeginReclaim(const std::string& object_key) {
  MutexLock lock(mu_);
  if (held_objects_.count(object_key) > 0) return false;
  reclaiming_objects_.insert(object_key);
  return true;
}

void Sink::EndReclaim(const std::string& object_key) {
  MutexLock lock(mu_);
  if (auto it = reclaiming_objects_.find(object_key); it != reclaiming_objects_.end()) reclaiming_objects_.erase(it);
}

bool Sink::HoldsBlock(const BlockAddress& address) const {
  MutexLock lock(mu_);
  return held_blocks_.count(address) > 0;
}

bool Sink::Holds(const std::string& manifest_key) const {
  MutexLock lock(mu_);
  return held_manifests_.count(manifest_key) > 0;
}

std::vector<FailedJob> Sink::Failed() const {
  MutexLock lock(mu_);
  std::vector<FailedJob> out;
  for (const auto& j : failed_) {
    out.push_back({j->id, j->pair.manifest_key, j->pair.decoded.entries.size(), j->pair.bytes(),
                   j->attempts, j->last_error});
  }
  return out;
}

bool Sink::Retry(uint64_t job_id) {
  MutexLock lock(mu_);
  for (auto it = failed_.begin(); it != failed_.end(); ++it) {
    if ((*it)->id != job_id) continue;
    (*it)->attempts = 0;
    (*it)->due = Clock::now();
    pending_.push_back(std::move(*it));
    failed_.erase(it);
    stats_.retried++;
    return true;
  }
  return false;
}

bool Sink::Drop(uint64_t job_id) {
  MutexLock lock(mu_);
  for (auto it = failed_.begin(); it != failed_.end(); ++it) {
    if ((*it)->id != job_id) continue;
    stats_.bytes_held -= (*it)->pair.bytes();
    stats_.dropped++;
    Release((*it)->pair);
    failed_.erase(it);
    return true;
  }
  return false;
}

SinkStats Sink::Stats() const {
  MutexLock lock(mu_);
  SinkStats s = stats_;
  s.pending = pending_.size();
  s.in_flight = in_flight_;
  s.failed_now = failed_.size();
  return s;
}

}  // namespace gpucache::cold
