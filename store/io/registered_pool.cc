#include "store/io/registered_pool.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace gpucache {

std::unique_ptr<RegisteredPool> RegisteredPool::Create(const RegisteredPoolOptions& options) {
  if (options.slots == 0 || options.slot_bytes == 0 || options.slot_bytes % kIoAlignment != 0 ||
      options.slots > std::numeric_limits<uint32_t>::max() ||
      options.slot_bytes > std::numeric_limits<size_t>::max() / options.slots) {
    return nullptr;
  }
  void* memory = std::aligned_alloc(kIoAlignment, options.slots * options.slot_bytes);
  if (memory == nullptr) return nullptr;
  std::memset(memory, 0, options.slots * options.slot_bytes);  // touch: no faults under I/O
  return std::unique_ptr<RegisteredPool>(
      new RegisteredPool(static_cast<uint8_t*>(memory), options.slots, options.slot_bytes));
}

RegisteredPool::RegisteredPool(uint8_t* memory, size_t slots, size_t slot_bytes)
    : memory_(memory), slot_bytes_(slot_bytes), slot_count_(slots), slots_(slots) {
  free_unbound_.reserve(slots);
  free_bound_.reserve(slots);
  // LIFO: push in reverse so slot 0 is handed out first.
  for (size_t i = slots; i-- > 0;) free_unbound_.push_back(static_cast<uint32_t>(i));
}

RegisteredPool::~RegisteredPool() {
  MutexLock lock(mu_);
  bool busy = std::any_of(slots_.begin(), slots_.end(),
                          [](const Slot& s) { return s.state != SlotState::kFree; });
  // A slot still in use may be the target of a kernel write that has not landed yet: freeing the
  // memory would let it corrupt whatever the allocator puts there next. Leak it instead.
  if (!busy) std::free(memory_);
}

std::span<uint8_t> RegisteredPool::Buffer(uint32_t slot) const {
  return {memory_ + size_t{slot} * slot_bytes_, slot_bytes_};
}

std::vector<iovec> RegisteredPool::Iovecs() const {
  std::vector<iovec> v(slot_count_);
  for (size_t i = 0; i < v.size(); ++i) v[i] = {memory_ + i * slot_bytes_, slot_bytes_};
  return v;
}

void RegisteredPool::Bind(uint32_t slot, bool bound) {
  MutexLock lock(mu_);
  if (slot >= slots_.size() || slots_[slot].bound == bound) return;
  Slot& s = slots_[slot];
  if (s.state == SlotState::kFree) {
    auto& from = s.bound ? free_bound_ : free_unbound_;
    from.erase(std::find(from.begin(), from.end(), slot));
    (bound ? free_bound_ : free_unbound_).push_back(slot);
  }
  s.bound = bound;
}

Result<std::vector<SlotLease>> RegisteredPool::Checkout(size_t n, LeaseInfo info) {
  MutexLock lock(mu_);
  if (free_bound_.size() + free_unbound_.size() < n) {
    counters_.refused_batches++;
    return StatusCode::kExhausted;
  }
  std::vector<SlotLease> out;
  out.reserve(n);
  while (out.size() < n) {
    auto& from = free_bound_.empty() ? free_unbound_ : free_bound_;
    uint32_t index = from.back();
    from.pop_back();
    Slot& s = slots_[index];
    s.state = SlotState::kCheckedOut;
    s.lease = next_lease_++;
    s.info = info;
    out.push_back(SlotLease{index, s.lease, s.bound});
  }
  counters_.checkouts += n;
  return out;
}

RegisteredPool::Slot* RegisteredPool::CurrentLocked(const SlotLease& lease, SlotState want) {
  if (lease.slot >= slots_.size()) return nullptr;
  Slot& s = slots_[lease.slot];
  if (lease.id == 0 || s.lease != lease.id || s.state != want) {
    counters_.stale_refused++;
    return nullptr;
  }
  return &s;
}

void RegisteredPool::FreeLocked(uint32_t index) {
  Slot& s = slots_[index];
  s.state = SlotState::kFree;
  s.lease = 0;  // the retired id is never handed out again (next_lease_ only grows)
  s.info = {};
  (s.bound ? free_bound_ : free_unbound_).push_back(index);
}

void RegisteredPool::QuarantineLocked(Slot& s) {
  s.state = SlotState::kQuarantined;
  s.quarantined_epoch = epoch_;
  counters_.quarantines++;
}

StatusCode RegisteredPool::Release(const SlotLease& lease) {
  MutexLock lock(mu_);
  if (CurrentLocked(lease, SlotState::kCheckedOut) == nullptr) return StatusCode::kInvalidArgument;
  FreeLocked(lease.slot);
  counters_.releases++;
  return StatusCode::kOk;
}

StatusCode RegisteredPool::MarkUnknown(const SlotLease& lease) {
  MutexLock lock(mu_);
  Slot* s = CurrentLocked(lease, SlotState::kCheckedOut);
  if (s == nullptr) return StatusCode::kInvalidArgument;
  QuarantineLocked(*s);
  return StatusCode::kOk;
}

StatusCode RegisteredPool::AttestDrained(const SlotLease& lease) {
  MutexLock lock(mu_);
  if (CurrentLocked(lease, SlotState::kQuarantined) == nullptr) return StatusCode::kInvalidArgument;
  FreeLocked(lease.slot);
  counters_.attested++;
  return StatusCode::kOk;
}

size_t RegisteredPool::ExpireLeases(uint64_t now_ns) {
  MutexLock lock(mu_);
  size_t n = 0;
  for (Slot& s : slots_) {
    if (s.state == SlotState::kCheckedOut && s.info.expires_at_ns != 0 &&
        s.info.expires_at_ns <= now_ns) {
      QuarantineLocked(s);
      ++n;
    }
  }
  counters_.expired += n;
  return n;
}

Result<uint64_t> RegisteredPool::FenceEpoch() {
  MutexLock lock(mu_);
  if (epoch_blocked_ || epoch_ == std::numeric_limits<uint64_t>::max()) return StatusCode::kBusy;
  for (Slot& s : slots_) {
    if (s.state == SlotState::kCheckedOut) QuarantineLocked(s);  // the lease is revoked
  }
  return ++epoch_;
}

Result<size_t> RegisteredPool::ReclaimFenced(uint64_t epoch) {
  MutexLock lock(mu_);
  if (epoch > epoch_) return StatusCode::kInvalidArgument;
  if (epoch < epoch_) return StatusCode::kFenced;
  size_t n = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state == SlotState::kQuarantined && s.quarantined_epoch < epoch) {
      FreeLocked(i);
      ++n;
    }
  }
  counters_.reclaimed += n;
  return n;
}

uint64_t RegisteredPool::epoch() const {
  MutexLock lock(mu_);
  return epoch_;
}

PoolCounters RegisteredPool::Counters() const {
  MutexLock lock(mu_);
  PoolCounters c = counters_;
  c.slots = slots_.size();
  c.epoch = epoch_;
  c.free = free_bound_.size() + free_unbound_.size();
  for (const Slot& s : slots_) {
    c.checked_out += s.state == SlotState::kCheckedOut;
    c.quarantined += s.state == SlotState::kQuarantined;
    c.bound += s.bound;
  }
  return c;
}

void RegisteredPool::TEST_BlockEpoch(bool blocked) {
  MutexLock lock(mu_);
  epoch_blocked_ = blocked;
}

}  // namespace gpucache
