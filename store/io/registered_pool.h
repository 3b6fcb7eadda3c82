// RegisteredPool: a bounded set of fixed-size, 4096-aligned I/O buffers ("slots") meant to be
// registered with io_uring as fixed buffers (slot i is buffer index i of every ring it is bound
// to). The rules are the seed's RegisteredPool, translated:
//
//   - Checkout(n) takes a whole batch or nothing: it prefers slots already bound to the rings,
//     then unbound ones; a batch that cannot be fully satisfied changes nothing (kExhausted).
//   - Release(lease) returns a slot whose I/O completion is known.
//   - MarkUnknown(lease) quarantines a slot whose I/O completion is unknown (cancelled or timed
//     out with no completion): the kernel may still write into it. Lease expiry does not free a
//     checked-out or a quarantined slot (an expired checkout is quarantined, never freed).
//   - A quarantined slot comes back only through FenceEpoch() then ReclaimFenced(new epoch)
//     (frees what was quarantined before that fence; a stale epoch is refused), or through
//     AttestDrained(lease): its completion finally arrived. A fence also revokes every current
//     lease (those slots join the fenced quarantine); if the epoch cannot advance, nothing
//     changes and checked-out slots stay checked out.
//   - Lease ids are monotonic and never recycled: a late completion or a stale Release that
//     names a retired lease is refused instead of freeing someone else's slot.
//
// Memory of a slot that is quarantined or checked out when the pool is destroyed is never
// handed back to the allocator (the kernel may still write there): the pool leaks it on purpose.
//
// REQUIRES (ReclaimFenced): every I/O issued on a slot before the fence has finished, e.g. the
// rings that used the slots were torn down and drained. The pool cannot check this.
//
// Thread safety: every method is safe to call concurrently (one mutex, never held across I/O).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "store/status.h"
#include "store/mutex.h"

namespace gpucache {

inline constexpr size_t kIoAlignment = 4096;

// One checked-out slot. Copyable (it is a handle, not the ownership): the pool refuses any use
// of a lease that is no longer the slot's current one.
struct SlotLease {
  uint32_t slot = 0;
  uint64_t id = 0;     // the lease's generation: unique for the pool's life, never 0
  bool bound = false;  // the slot is registered with the rings (use IORING_OP_READ_FIXED)
  bool operator==(const SlotLease&) const = default;
};

// Who holds a lease and until when.
struct LeaseInfo {
  uint64_t owner = 0;          // free-form tag (a ring index, a thread); for diagnostics
  uint64_t expires_at_ns = 0;  // steady-clock ns after which ExpireLeases quarantines it; 0 never
};

struct PoolCounters {
  size_t slots = 0;
  size_t free = 0;
  size_t checked_out = 0;
  size_t quarantined = 0;
  size_t bound = 0;
  uint64_t epoch = 0;
  uint64_t checkouts = 0;          // slots handed out
  uint64_t refused_batches = 0;    // Checkout batches refused whole
  uint64_t releases = 0;
  uint64_t stale_refused = 0;      // Release/MarkUnknown/AttestDrained of a retired lease
  uint64_t quarantines = 0;        // slots ever quarantined (unknown, expired or revoked)
  uint64_t attested = 0;           // quarantined slots freed by AttestDrained
  uint64_t reclaimed = 0;          // quarantined slots freed by ReclaimFenced
  uint64_t expired = 0;            // checkouts quarantined because their lease expired
};

struct RegisteredPoolOptions {
  size_t slots = 32;             // how many buffers; bounded, never grows
  size_t slot_bytes = 1u << 20;  // bytes per buffer; a multiple of kIoAlignment
};

class RegisteredPool {
 public:
  // Null when the options are invalid (0 slots, slot_bytes not a multiple of 4096) or the
  // memory cannot be allocated.
  static std::unique_ptr<RegisteredPool> Create(const RegisteredPoolOptions& options);
  ~RegisteredPool();
  RegisteredPool(const RegisteredPool&) = delete;
  RegisteredPool& operator=(const RegisteredPool&) = delete;

  size_t slot_count() const { return slot_count_; }
  size_t slot_bytes() const { return slot_bytes_; }
  // The memory of `slot`: stable for the pool's life. Only the current lease holder may touch it.
  std::span<uint8_t> Buffer(uint32_t slot) const;
  // Every slot's memory, in slot order: what io_uring_register_buffers takes.
  std::vector<iovec> Iovecs() const;

  // Records that `slot` is registered with the rings at buffer index `slot` (or no longer is).
  void Bind(uint32_t slot, bool bound);

  // n slots, or kExhausted and no change. n == 0 is an empty batch.
  Result<std::vector<SlotLease>> Checkout(size_t n, LeaseInfo info);
  // The I/O on the lease's slot has completed (or was never issued): the slot is free again.
  // kInvalidArgument for a stale lease (released, revoked by a fence, quarantined); nothing changes.
  StatusCode Release(const SlotLease& lease);
  // The I/O's completion is unknown: quarantines the slot. kInvalidArgument for a stale lease.
  StatusCode MarkUnknown(const SlotLease& lease);
  // The completion of the lease's I/O finally arrived: frees its slot if it is still quarantined
  // under that very lease. kInvalidArgument otherwise (already reclaimed, never quarantined).
  StatusCode AttestDrained(const SlotLease& lease);
  // Quarantines every checkout whose lease expired at `now_ns`; never frees a slot. Returns how
  // many were quarantined.
  size_t ExpireLeases(uint64_t now_ns);
  // Advances the epoch and revokes every current lease (those slots are quarantined as of the
  // old epoch). kBusy and no change when the epoch cannot advance.
  Result<uint64_t> FenceEpoch();
  // Frees every slot quarantined before the fence that produced `epoch`. kFenced when `epoch`
  // is stale (not the current one), kInvalidArgument when it is in the future.
  Result<size_t> ReclaimFenced(uint64_t epoch);

  uint64_t epoch() const;
  PoolCounters Counters() const;

  // Test hook: makes FenceEpoch fail as if the epoch could not advance.
  void TEST_BlockEpoch(bool blocked);

 private:
  enum class SlotState : uint8_t { kFree, kCheckedOut, kQuarantined };
  struct Slot {
    SlotState state = SlotState::kFree;
    bool bound = false;
    uint64_t lease = 0;             // current (or last quarantined) lease id; 0 when free
    LeaseInfo info;
    uint64_t quarantined_epoch = 0; // epoch at quarantine
  };

  RegisteredPool(uint8_t* memory, size_t slots, size_t slot_bytes);
  void QuarantineLocked(Slot& s) REQUIRES(mu_);
  void FreeLocked(uint32_t index) REQUIRES(mu_);
  Slot* CurrentLocked(const SlotLease& lease, SlotState want) REQUIRES(mu_);

  uint8_t* const memory_;  // slots_.size() * slot_bytes_, 4096-aligned; see ~RegisteredPool
  const size_t slot_bytes_;
  const size_t slot_count_;  // slots_.size(), fixed: read without the lock

  mutable Mutex mu_;
  std::vector<Slot> slots_ GUARDED_BY(mu_);
  std::vector<uint32_t> free_bound_ GUARDED_BY(mu_);  // free slots, LIFO
  std::vector<uint32_t> free_unbound_ GUARDED_BY(mu_);
  uint64_t next_lease_ GUARDED_BY(mu_) = 1;  // never reused
  uint64_t epoch_ GUARDED_BY(mu_) = 1;
  bool epoch_blocked_ GUARDED_BY(mu_) = false;
  PoolCounters counters_ GUARDED_BY(mu_);  // the cumulative fields
};

}  // namespace gpucache
