#include "cold/sink.h"

#include <atomic>
#include <thread>

namespace gpucache::cold {

struct Sink::Job {
  uint64_t id = 0;
  PackedPair pair;
  int attempts = 0;
  size_t next_step = 0;  // 0 object, 1 manifest, 2 + i locator of entry i
  JobError last_error;
  size_t steps() const { return 2 + pair.decoded.entries.size(); }
};

std::string SinkLimits::Validate() const {
  if (max_jobs == 0) return "max_jobs must be at least 1";
  if (max_bytes == 0) return "max_bytes must be at least 1";
  if (max_attempts < 1 || max_attempts > 10) return "max_attempts must be 1..10";
  if (concurrency < 1 || concurrency > 64) return "concurrency must be 1..64";
  return "";
}

std::string_view ToString(Admission a) {
  switch (a) {
    case Admission::kAccepted: return "accepted";
    case Admission::kInvalid: return "invalid";
    case Admission::kFull: return "full";
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

Sink::Sink(ObjectStore& store, std::string prefix, SinkLimits limits)
    : store_(store), prefix_(std::move(prefix)), limits_(limits) {}

Sink::~Sink() = default;

SubmitOutcome Sink::Submit(PackedPair pair) {
  SubmitOutcome out;
  if (std::string why = ValidatePair(prefix_, pair); !why.empty()) {
    std::lock_guard lock(mu_);
    stats_.refused++;
    return {Admission::kInvalid, 0, why};
  }
  std::lock_guard lock(mu_);
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
  out.job_id = job->id;
  pending_.push_back(std::move(job));
  stats_.submitted++;
  return out;
}

// Runs the job's remaining steps once; stops at the first error. No lock held: I/O.
Sink::Outcome Sink::Attempt(Job& job) {
  job.attempts++;
  const PackedPair& p = job.pair;
  while (job.next_step < job.steps()) {
    std::string step, key;
    std::span<const uint8_t> body;
    if (job.next_step == 0) {
      step = "object", key = p.object_key, body = p.object;
    } else if (job.next_step == 1) {
      step = "manifest", key = p.manifest_key, body = p.manifest;
    } else {
      const ManifestEntry& e = p.decoded.entries[job.next_step - 2];
      step = "locator", key = LocatorKey(prefix_, e.address), body = p.locators[job.next_step - 2];
    }
    ObjectResult<Done> r = store_.Put(key, body);
    {
      std::lock_guard lock(mu_);
      stats_.requests++;
    }
    if (!r.ok()) {
      job.last_error = JobError{job.id, step, r.error()};
      bool temporary = r.error().kind == ObjectErrorKind::kTemporary;
      return temporary && job.attempts < limits_.max_attempts ? Outcome::kRequeue : Outcome::kFail;
    }
    job.next_step++;
  }
  return Outcome::kUploaded;
}

void Sink::Settle(std::unique_ptr<Job> job, Outcome outcome, DrainReport& report) {
  std::lock_guard lock(mu_);
  in_flight_--;
  report.attempted++;
  if (outcome != Outcome::kUploaded && !report.first_error) report.first_error = job->last_error;
  switch (outcome) {
    case Outcome::kUploaded:
      report.uploaded++;
      stats_.uploaded++;
      stats_.bytes_held -= job->pair.bytes();
      break;
    case Outcome::kRequeue:
      report.requeued++;
      pending_.push_back(std::move(job));
      break;
    case Outcome::kFail:
      report.failed++;
      stats_.failed++;
      failed_.push_back(std::move(job));
      break;
  }
}

DrainReport Sink::DrainRound() {
  std::lock_guard drain(drain_mu_);
  std::deque<std::unique_ptr<Job>> round;
  {
    std::lock_guard lock(mu_);
    round.swap(pending_);
    in_flight_ += round.size();
  }
  DrainReport report;
  report.rounds = 1;
  std::mutex round_mu;  // guards `round` and `report` between the workers
  auto worker = [&] {
    for (;;) {
      std::unique_ptr<Job> job;
      {
        std::lock_guard lock(round_mu);
        if (round.empty()) return;
        job = std::move(round.front());
        round.pop_front();
      }
      Outcome o = Attempt(*job);
      if (o == Outcome::kUploaded && uploaded_hook_) uploaded_hook_(job->pair);
      std::lock_guard lock(round_mu);
      Settle(std::move(job), o, report);
    }
  };
  size_t n = std::min<size_t>(limits_.concurrency, round.size());
  std::vector<std::thread> workers;
  for (size_t i = 1; i < n; i++) workers.emplace_back(worker);
  worker();
  for (std::thread& t : workers) t.join();
  std::lock_guard lock(mu_);
  report.pending = pending_.size();
  report.failed_total = failed_.size();
  return report;
}

DrainReport Sink::Drain(size_t max_rounds) {
  DrainReport total;
  for (size_t i = 0; i < max_rounds; i++) {
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) break;
    }
    DrainReport r = DrainRound();
    total.rounds += r.rounds;
    total.attempted += r.attempted;
    total.uploaded += r.uploaded;
    total.requeued += r.requeued;
    total.failed += r.failed;
    if (!total.first_error) total.first_error = r.first_error;
  }
  std::lock_guard lock(mu_);
  total.pending = pending_.size();
  total.failed_total = failed_.size();
  return total;
}

std::vector<FailedJob> Sink::Failed() const {
  std::lock_guard lock(mu_);
  std::vector<FailedJob> out;
  for (const auto& j : failed_) {
    out.push_back({j->id, j->pair.manifest_key, j->pair.decoded.entries.size(), j->pair.bytes(),
                   j->attempts, j->last_error});
  }
  return out;
}

bool Sink::Retry(uint64_t job_id) {
  std::lock_guard lock(mu_);
  for (auto it = failed_.begin(); it != failed_.end(); ++it) {
    if ((*it)->id != job_id) continue;
    (*it)->attempts = 0;
    pending_.push_back(std::move(*it));
    failed_.erase(it);
    return true;
  }
  return false;
}

bool Sink::Drop(uint64_t job_id) {
  std::lock_guard lock(mu_);
  for (auto it = failed_.begin(); it != failed_.end(); ++it) {
    if ((*it)->id != job_id) continue;
    stats_.bytes_held -= (*it)->pair.bytes();
    stats_.dropped++;
    failed_.erase(it);
    return true;
  }
  return false;
}

SinkStats Sink::Stats() const {
  std::lock_guard lock(mu_);
  SinkStats s = stats_;
  s.pending = pending_.size();
  s.in_flight = in_flight_;
  s.failed_now = failed_.size();
  return s;
}

}  // namespace gpucache::cold
