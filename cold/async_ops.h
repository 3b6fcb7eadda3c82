// AsyncOps: control requests that may wait on the object store (refills) run here, on a few
// worker threads of their own, instead of inside the write() to .gpucache/ctl that asked for
// them (adr/0013-refill-off-the-control-file.md). The kernel serializes writes to one inode,
// so a refill that waited on a slow S3 inside write() stalled every control request on the
// node; now the write() returns an op id at once and the caller polls it.
//
// Bounded: at most `max_ops` ops are held (queued, running, or finished and not yet taken).
// Room for a new op is made only from its own quota key's finished results, oldest first,
// never from another key's (one caller's flood of quick ops once erased another tenant's
// result before it was polled); past that, a new op is refused (Submit returns 0). An op's
// result is given to the uid that submitted it (or an admin) once, then forgotten; a result
// nobody took for kResultTtl is forgotten too.
//
// Two lanes: refills (Lane::kShared) run on `workers` threads, several at once; a pack
// (Lane::kSerial), which may run for hours and of which only one can make progress at a time
// (ColdTier::Pack), runs on one thread of its own, the next queued behind it without holding a
// worker. So one tenant's packs never hold the workers another tenant's refills need.
//
// Shared fairly: the ops of one quota key (the submitter's tenants; a tenant's members share
// it) may hold at most a quarter of `max_ops` at once, unfinished or finished and not taken
// (its own oldest finished results make room for its next op), so one tenant that submits and
// never polls cannot refuse everyone else's ops (issue 29).
//
// Thread safety: every method may be called from any thread. Workers (and the serial lane's
// thread) start at the first Submit (never before the daemon has detached: threads do not
// survive fork).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/mutex.h"

namespace gpucache::cold {

class AsyncOps {
 public:
  AsyncOps(size_t workers, size_t max_ops) : workers_(workers), max_ops_(max_ops) {}
  ~AsyncOps() { Shutdown(); }
  // Waits for running ops and stops the workers; queued ops never run. Idempotent.
  void Shutdown();
  AsyncOps(const AsyncOps&) = delete;
  AsyncOps& operator=(const AsyncOps&) = delete;

  static constexpr std::chrono::seconds kResultTtl{300};
  // kShared: on one of the `workers` threads. kSerial: one at a time in the order submitted, on
  // a thread of its own (see "Two lanes" above).
  enum class Lane : uint8_t { kShared, kSerial };
  // Queues `work` (which returns the op's reply line) in `lane`; its op id, or 0 when the pool
  // is full of other keys' ops or `quota_key` holds its share of unfinished ops already (both
  // lanes count).
  uint64_t Submit(uint32_t owner_uid, std::function<std::string()> work, const std::string& quota_key = "",
                  Lane lane = Lane::kShared);
  // Unfinished ops of `quota_key` one key may hold.
  size_t ShareOfOneKey() const { return std::max<size_t>(1, max_ops_ / 4); }

  enum class State : uint8_t { kUnknown, kQueued, kRunning, kDone };
  struct Poll {
    State state = State::kUnknown;
    std::string reply;  // kDone: the op's reply line (now forgotten by the pool)
  };
  // kUnknown for an id that does not exist, was already taken, or belongs to another uid
  // (a caller learns nothing of another user's ops). With `wait` > 0, a queued or running op
  // is waited for, up to `wait`, so a caller learns it is done when it is done instead of
  // polling; at most `workers` callers wait at once (each holds a FUSE thread: docs/
  // control-protocol.md), others are answered at once, as without `wait`.
  Poll Take(uint64_t id, uint32_t uid, bool admin,
            std::chrono::milliseconds wait = std::chrono::milliseconds(0));

  size_t held() const;
  // The state of op `id` without taking its result (kUnknown: none, or another uid's). Tests.
  State Peek(uint64_t id) const;
  // Callers waiting in Take now. Tests.
  size_t waiting() const;

 private:
  struct Op {
    uint32_t owner = 0;
    State state = State::kQueued;
    std::function<std::string()> work;
    std::string reply;
    std::string quota_key;
    std::chrono::steady_clock::time_point finished;  // kDone: when
  };
  size_t UnfinishedOfLocked(const std::string& key) const REQUIRES(mu_);
  // Takes the next op of the shared lane's `queue` to run: the oldest of the key served least
  // recently (round robin between keys), so that one key's full share of slow ops queued first
  // does not hold up another key's behind all of them.
  uint64_t TakeNextLocked(std::deque<uint64_t>& queue) REQUIRES(mu_);
  void Run(Lane lane);
  static std::string RunOne(const std::function<std::string()>& work);
  void EvictExpiredLocked() REQUIRES(mu_);
  bool EvictOldestDoneOfLocked(const std::string& key) REQUIRES(mu_);
  size_t HeldByLocked(const std::string& key) const REQUIRES(mu_);

  const size_t workers_;
  const size_t max_ops_;
  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::condition_variable_any finished_;  // an op is done (or the pool stops)
  size_t waiting_ GUARDED_BY(mu_) = 0;  // callers waiting in Take
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Op> ops_ GUARDED_BY(mu_);  // by id, so the oldest finished op is found first
  std::array<std::deque<uint64_t>, 2> queues_ GUARDED_BY(mu_);  // queued ids by lane, in order
  std::map<std::string, uint64_t, std::less<>> last_start_ GUARDED_BY(mu_);  // by key: its last op's start
  uint64_t starts_ GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

std::string_view ToString(AsyncOps::State s);

}  // namespace gpucache::cold
