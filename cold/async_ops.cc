#include "cold/async_ops.h"

#include <errno.h>

#include <map>

#include "common/control_protocol.h"

namespace gpucache::cold {

std::string_view ToString(AsyncOps::State s) {
  switch (s) {
    case AsyncOps::State::kUnknown: return "unknown";
    case AsyncOps::State::kQueued: return "queued";
    case AsyncOps::State::kRunning: return "running";
    case AsyncOps::State::kDone: return "done";
  }
  return "?";
}

void AsyncOps::Shutdown() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  finished_.notify_all();
  for (std::thread& t : threads) t.join();
}

void AsyncOps::EvictExpiredLocked() {
  const auto expired = std::chrono::steady_clock::now() - kResultTtl;
  for (auto it = ops_.begin(); it != ops_.end();) {  // results nobody came for
    bool stale = it->second.state == State::kDone && it->second.finished < expired;
    it = stale ? ops_.erase(it) : std::next(it);
  }
}

// Forgets the oldest finished result of `key` (ids grow with time); false if it has none.
bool AsyncOps::EvictOldestDoneOfLocked(const std::string& key) {
  for (auto it = ops_.begin(); it != ops_.end(); ++it) {
    if (it->second.state == State::kDone && it->second.quota_key == key) {
      ops_.erase(it);
      return true;
    }
  }
  return false;
}

size_t AsyncOps::HeldByLocked(const std::string& key) const {
  size_t n = 0;
  for (const auto& [id, op] : ops_) n += op.quota_key == key;
  return n;
}

size_t AsyncOps::UnfinishedOfLocked(const std::string& key) const {
  size_t n = 0;
  for (const auto& [id, op] : ops_) n += op.state != State::kDone && op.quota_key == key;
  return n;
}

uint64_t AsyncOps::Submit(uint32_t owner_uid, std::function<std::string()> work, const std::string& quota_key,
                          Lane lane) {
  MutexLock lock(mu_);
  if (stop_) return 0;
  EvictExpiredLocked();
  // A key's results wait for it (up to kResultTtl): room is only ever made from the submitter's
  // own finished results, never another caller's. And a key holds at most its share of the pool,
  // finished results included, so no key can fill it for the others.
  if (!quota_key.empty()) {
    if (UnfinishedOfLocked(quota_key) >= ShareOfOneKey()) return 0;
    while (HeldByLocked(quota_key) >= ShareOfOneKey() && EvictOldestDoneOfLocked(quota_key)) {
    }
  }
  if (ops_.size() >= max_ops_ && !EvictOldestDoneOfLocked(quota_key)) return 0;
  while (threads_.size() < workers_ + 1) {  // the workers, then the serial lane's thread
    Lane runs = threads_.size() < workers_ ? Lane::kShared : Lane::kSerial;
    threads_.emplace_back([this, runs] { Run(runs); });
  }
  uint64_t id = next_id_++;
  ops_[id] = Op{owner_uid, State::kQueued, std::move(work), {}, quota_key, {}};
  queues_[static_cast<size_t>(lane)].push_back(id);
  wake_.notify_all();  // the lanes share the condition: one woken thread may not be the lane's
  return id;
}

AsyncOps::Poll AsyncOps::Take(uint64_t id, uint32_t uid, bool admin,
                              std::chrono::milliseconds wait) {
  MutexLock lock(mu_);
  auto it = ops_.find(id);
  if (it == ops_.end() || (!admin && it->second.owner != uid)) return {};
  if (wait.count() > 0 && it->second.state != State::kDone && waiting_ < workers_) {
    waiting_++;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
      it = ops_.find(id);  // evicted meanwhile only if done and the pool was full
      if (stop_ || it == ops_.end() || it->second.state == State::kDone) break;
      if (finished_.wait_until(mu_, deadline) == std::cv_status::timeout) {
        it = ops_.find(id);
        break;
      }
    }
    waiting_--;
    if (it == ops_.end()) return {};
  }
  Poll p{it->second.state, {}};
  if (p.state == State::kDone) {
    p.reply = std::move(it->second.reply);
    ops_.erase(it);
  }
  return p;
}

AsyncOps::State AsyncOps::Peek(uint64_t id) const {
  MutexLock lock(mu_);
  auto it = ops_.find(id);
  return it == ops_.end() ? State::kUnknown : it->second.state;
}

size_t AsyncOps::waiting() const {
  MutexLock lock(mu_);
  return waiting_;
}

size_t AsyncOps::held() const {
  MutexLock lock(mu_);
  return ops_.size();
}

uint64_t AsyncOps::TakeNextLocked(std::deque<uint64_t>& queue) {
  // The queue holds at most the pool's few hundred ops: a scan per op started.
  auto best = queue.begin();
  uint64_t best_start = UINT64_MAX;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    auto op = ops_.find(*it);
    if (op == ops_.end()) continue;  // forgotten: Run skips it when it is taken
    auto last = last_start_.find(op->second.quota_key);
    uint64_t start = last == last_start_.end() ? 0 : last->second;
    if (start < best_start) {  // strictly earlier: the oldest op of the least recent key
      best = it;
      best_start = start;
      if (start == 0) break;
    }
  }
  uint64_t id = *best;
  queue.erase(best);
  if (auto op = ops_.find(id); op != ops_.end()) {
    if (last_start_.size() > 4096) last_start_.clear();  // keys are tenants: never in practice
    last_start_[op->second.quota_key] = ++starts_;
  }
  return id;
}

// An op's exception ends that op, not the daemon: it would otherwise leave this worker thread
// (std::terminate). The synchronous path has the same net (ControlPlane::Handle).
std::string AsyncOps::RunOne(const std::function<std::string()>& work) {
  try {
    return work();
  } catch (const std::exception& e) {
    return control_protocol::Error(EIO, std::string("the op failed: ") + e.what());
  } catch (...) {
    return control_protocol::Error(EIO, "the op failed");
  }
}

void AsyncOps::Run(Lane lane) {
  const size_t queue = static_cast<size_t>(lane);
  MutexLock lock(mu_);
  for (;;) {
    while (!stop_ && queues_[queue].empty()) wake_.wait(mu_);
    if (stop_) return;
    uint64_t id;
    if (lane == Lane::kShared) {
      id = TakeNextLocked(queues_[queue]);
    } else {  // the serial lane keeps the order ops were submitted in
      id = queues_[queue].front();
      queues_[queue].pop_front();
    }
    auto it = ops_.find(id);
    if (it == ops_.end()) continue;
    it->second.state = State::kRunning;
    std::function<std::string()> work = std::move(it->second.work);
    lock.Unlock();
    std::string reply = RunOne(work);  // the object store I/O, without the lock
    lock.Lock();
    it = ops_.find(id);  // a running op is never evicted, but stay defensive
    if (it == ops_.end()) continue;
    it->second.state = State::kDone;
    it->second.reply = std::move(reply);
    it->second.finished = std::chrono::steady_clock::now();
    finished_.notify_all();
  }
}

}  // namespace gpucache::cold
