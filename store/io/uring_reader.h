// UringReader: reads of block payloads through io_uring into RegisteredPool buffers
// (IORING_OP_READ_FIXED), with O_DIRECT where the backing filesystem allows it, and the pread
// fallback (store/posix_io.h) wherever io_uring is not available.
//
// A read either fills the caller's whole span or fails: a completion that does not arrive
// within `timeout_ns` is cancelled; if the cancellation does not produce the completion within
// `cancel_grace_ns` the slot is quarantined (RegisteredPool::MarkUnknown) and the read fails with
// kIoError. Partial or unverified bytes are never reported as success. The late completion,
// when it finally arrives, is reaped by the next user of that ring (or Poll()) and attests the
// slot drained (RegisteredPool::AttestDrained), which frees it.
//
// Rings: a small fixed set (`rings`), each used by one caller at a time (try-locked, never
// waited for: a caller that finds every ring busy reads with pread instead, counted). Why not
// one ring per thread: FUSE worker threads outlive any one store, a thread_local ring cannot be
// torn down (and its late completions reaped) when the reader goes away, and every ring pins
// the pool again. Why not one ring behind one mutex: the mutex would be held across the wait
// for the device and serialize every reader. A set of exclusively used rings gives each
// concurrent caller its own submission queue with the lifetime of the reader.
//
// Thread safety: Read, Poll and stats are safe to call concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "store/io/registered_pool.h"
#include "store/posix_io.h"
#include "store/status.h"

namespace gpucache {

struct UringReaderOptions {
  size_t queue_depth = 0;      // reads in flight per ring; 0: from probe_dir's device, else 32
  std::string probe_dir;       // a data directory, to size queue_depth from its block device
  size_t rings = 4;            // concurrent callers served by io_uring; more use pread
  size_t slots = 32;           // RegisteredPool size (the bound on memory pinned for reads)
  size_t slot_bytes = 1u << 20;
  uint64_t timeout_ns = 5'000'000'000;    // a completion later than this fails the read
  uint64_t cancel_grace_ns = 20'000'000;  // then: how long to wait for the cancelled completion
  bool disable_uring = false;  // force the pread fallback (operators, tests)
  bool use_direct = true;      // O_DIRECT where the filesystem allows it
  // Reads straight into the caller's span when it, the offset and the length are 4096-aligned
  // (no bounce buffer, no memcpy). Off by default: such a read cannot be quarantined (the memory
  // is the caller's), so a timeout waits for the cancelled completion without bound.
  bool direct_into_out = false;
  // Before a read, ask the page cache (cachestat(2), no I/O started): a range that is
  // all there (a commit just wrote it, a buffered reader left it) is served by pread from
  // memory, anything else goes to the device. One extra syscall per read; off where cachestat
  // is missing (kernels before 6.5).
  bool page_cache_first = true;
  bool TEST_skip_cancel = false;  // a timeout leaves the request in flight (quarantine tests)
  int TEST_setup_errno = 0;       // io_uring_queue_init fails with this errno (EPERM, ENOSYS)
};

struct UringReaderStats {
  bool uring = false;            // io_uring in use (else every read is a pread)
  bool fixed_buffers = false;    // the pool is registered (READ_FIXED) with every ring
  std::string status;            // one line: what is in use and why
  size_t queue_depth = 0;
  size_t rings = 0;
  uint64_t reads = 0;            // Read calls
  uint64_t uring_reads = 0;      // served through io_uring
  uint64_t pread_reads = 0;      // served by pread (no io_uring, no free ring or slot)
  uint64_t page_cache_reads = 0; // found whole in the page cache and pread (page_cache_first)
  uint64_t timeouts = 0;         // reads failed by the completion timeout
  uint64_t late_completions = 0; // completions reaped after their read gave up
  PoolCounters pool;
};

// What a file is read through: `fd` (buffered, always valid) and, when the filesystem allows
// O_DIRECT, `direct_fd` on the same inode (else -1). Borrowed.
struct ReadTarget {
  int fd = -1;
  int direct_fd = -1;
};

class UringReader {
 public:
  // Never null: when io_uring cannot be set up (EPERM in a container, ENOSYS) or is disabled,
  // the reader serves every read with pread and stats().status says why. Null only when the
  // pool cannot be allocated (options invalid).
  static std::unique_ptr<UringReader> Create(const UringReaderOptions& options);
  ~UringReader();
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;

  // Reads exactly out.size() bytes at file offset `offset`; kIoError on EOF before that, on a
  // failed read or on a timeout. REQUIRES: target.fd valid.
  StatusCode Read(const ReadTarget& target, uint64_t offset, std::span<uint8_t> out);
  // Reaps late completions on idle rings (frees the slots they attest drained).
  void Poll();

  bool uring_active() const { return !rings_.empty(); }
  bool use_direct() const { return options_.use_direct && uring_active(); }
  UringReaderStats stats() const;
  RegisteredPool& pool() { return *pool_; }

 private:
  struct Ring;
  struct Piece;
  class Batch;
  explicit UringReader(const UringReaderOptions& options, std::unique_ptr<RegisteredPool> pool);
  void SetUp();
  // A ring whose mutex the caller now holds (try-locked), or null if every one is busy. The
  // analysis cannot name a lock chosen at run time; the caller asserts it.
  Ring* AcquireRing() NO_THREAD_SAFETY_ANALYSIS;
  void ReapLate(Ring& ring);
  StatusCode ReadOnRing(Ring& ring, const ReadTarget& target, uint64_t offset,
                        std::span<uint8_t> out);
  StatusCode ReadIntoOut(Ring& ring, int fd, uint64_t offset, std::span<uint8_t> out);
  StatusCode RunBatch(Ring& ring, int fd, bool direct, std::vector<Piece>& pieces);

  UringReaderOptions options_;
  std::unique_ptr<RegisteredPool> pool_;
  std::vector<std::unique_ptr<Ring>> rings_;  // set up once; empty = pread fallback
  bool fixed_ = false;
  std::string status_;
  std::atomic<size_t> next_ring_{0};
  std::atomic<uint64_t> reads_{0}, uring_reads_{0}, pread_reads_{0}, cached_reads_{0}, timeouts_{0}, late_{0};
};

// Queue depth for the block device holding `dir`: its /sys/.../queue/nr_requests clamped to
// [8, 64], or 32 when it cannot be found (tmpfs, overlay, no sysfs).
size_t QueueDepthFor(const std::string& dir);

// Opens an O_DIRECT descriptor on the same inode as `fd` (through /proc/self/fd, so a rename
// in between cannot swap the file) when the filesystem supports direct I/O with an alignment
// this reader meets (statx STATX_DIOALIGN <= 4096); else an invalid Fd (read buffered).
Fd OpenDirect(int fd);

}  // namespace gpucache
