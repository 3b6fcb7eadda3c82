#include "store/io/uring_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>

namespace gpucache {
namespace {

constexpr uint64_t kAlign = kIoAlignment;
// user_data of requests that read straight into the caller's memory: never a lease id (those
// count up from 1 and cannot reach bit 63).
constexpr uint64_t kIntoOutTag = 1ull << 63;

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint64_t AlignDown(uint64_t v) { return v & ~(kAlign - 1); }
uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) & ~(kAlign - 1); }

__kernel_timespec Timespec(uint64_t ns) {
  __kernel_timespec ts{};
  ts.tv_sec = static_cast<int64_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long long>(ns % 1'000'000'000);
  return ts;
}

// A read error that pread may not share (an O_DIRECT alignment the filesystem refuses, an
// opcode a filesystem does not support through io_uring): worth one retry with pread.
bool PreadMayServe(int err) { return err == EINVAL || err == EOPNOTSUPP || err == ENOTSUP; }

// Linux 6.5 cachestat(2); Debian 12's headers predate it.
struct CachestatRange {
  uint64_t off;
  uint64_t len;
};
struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
constexpr long kSysCachestat = 451;
std::atomic<bool> cachestat_missing{false};

// Whether every page of [offset, offset+len) is in the page cache, asked without starting any
// I/O (preadv2 RWF_NOWAIT would start readahead on a miss and read the data twice).
bool Cached(int fd, uint64_t offset, uint64_t len) {
  if (cachestat_missing.load(std::memory_order_relaxed)) return false;
  CachestatRange range{AlignDown(offset), AlignUp(offset + len) - AlignDown(offset)};
  Cachestat cs{};
  if (::syscall(kSysCachestat, fd, &range, &cs, 0) != 0) {
    if (errno == ENOSYS || errno == EPERM) cachestat_missing = true;  // old kernel, seccomp
    return false;
  }
  return cs.nr_cache * 4096 >= range.len;
}

}  // namespace

// One read of [pos, pos+len) into buf; id is the user_data of its SQE.
struct UringReader::Piece {
  uint64_t pos = 0;
  uint32_t len = 0;
  uint8_t* buf = nullptr;
  uint64_t id = 0;
  SlotLease lease;       // id 0 when reading into the caller's memory
  uint32_t got = 0;
  int err = 0;
  bool done = false;
  bool unknown = false;  // completion unknown: the slot is quarantined, never copied from
};

struct UringReader::Ring {
  io_uring ring{};
  Mutex mu;  // held by the one caller using the ring (try-locked)
  // Leases whose read gave up without a completion, by user_data.
  std::unordered_map<uint64_t, SlotLease> orphans GUARDED_BY(mu);
  bool initialized = false;
  ~Ring() {
    if (initialized) io_uring_queue_exit(&ring);
  }
};

size_t QueueDepthFor(const std::string& dir) {
  constexpr size_t kDefault = 32;
  struct stat st{};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0) return kDefault;
  std::string base = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                     std::to_string(minor(st.st_dev));
  for (const char* rel : {"/queue/nr_requests", "/../queue/nr_requests"}) {  // disk, partition
    std::ifstream in(base + rel);
    size_t n = 0;
    if (in >> n && n > 0) return std::clamp<size_t>(n, 8, 64);
  }
  return kDefault;
}

Fd OpenDirect(int fd) {
  struct statx stx{};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN)) {
    if (stx.stx_dio_offset_align == 0 || stx.stx_dio_offset_align > kAlign ||
        stx.stx_dio_mem_align > kAlign) {
      return Fd();  // no direct I/O here, or an alignment this reader does not meet
    }
  }
  // Filesystems that do not report STATX_DIOALIGN: the open itself is the probe (EINVAL on a
  // filesystem without direct I/O).
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  return Fd(::open(self.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
}

std::unique_ptr<UringReader> UringReader::Create(const UringReaderOptions& options) {
  auto pool = RegisteredPool::Create({options.slots, options.slot_bytes});
  if (!pool || options.rings == 0) return nullptr;
  std::unique_ptr<UringReader> r(new UringReader(options, std::move(pool)));
  r->SetUp();
  return r;
}

UringReader::UringReader(const UringReaderOptions& options, std::unique_ptr<RegisteredPool> pool)
    : options_(options), pool_(std::move(pool)) {}

UringReader::~UringReader() {
  // Give late completions one grace period; slots still unknown stay quarantined and the pool
  // keeps their memory out of the allocator (RegisteredPool's destructor).
  for (auto& r : rings_) {
    MutexLock lock(r->mu);
    if (r->orphans.empty()) continue;
    for (auto& [id, lease] : r->orphans) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&r->ring)) {
        io_uring_prep_cancel64(sqe, id, 0);
        io_uring_sqe_set_data64(sqe, 0);
      }
    }
    io_uring_submit(&r->ring);
    uint64_t deadline = NowNs() + options_.cancel_grace_ns;
    while (!r->orphans.empty() && NowNs() < deadline) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts = Timespec(options_.cancel_grace_ns / 4 + 1);
      if (io_uring_wait_cqe_timeout(&r->ring, &cqe, &ts) == 0) ReapLate(*r);
    }
  }
  rings_.clear();
  pool_.reset();
}

void UringReader::SetUp() {
  if (options_.disable_uring) {
    status_ = "pread (io_uring disabled by option)";
    return;
  }
  size_t qd = options_.queue_depth ? options_.queue_depth : QueueDepthFor(options_.probe_dir);
  options_.queue_depth = qd;
  for (size_t i = 0; i < options_.rings; ++i) {
    auto ring = std::make_unique<Ring>();
    int r = options_.TEST_setup_errno
                ? -options_.TEST_setup_errno
                : io_uring_queue_init(static_cast<unsigned>(qd), &ring->ring, 0);
    if (r < 0) {
      if (rings_.empty()) {
        status_ = std::string("pread (io_uring unavailable: ") + ::strerror(-r) + ")";
        return;
      }
      break;  // fewer rings than asked
    }
    ring->initialized = true;
    rings_.push_back(std::move(ring));
  }
  std::vector<iovec> iov = pool_->Iovecs();
  fixed_ = true;
  std::string why;
  for (auto& r : rings_) {
    int rc = io_uring_register_buffers(&r->ring, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0) {
      fixed_ = false;
      why = std::string(" (register: ") + ::strerror(-rc) + ")";
      break;
    }
  }
  if (!fixed_) {
    for (auto& r : rings_) io_uring_unregister_buffers(&r->ring);
  }
  for (uint32_t s = 0; s < pool_->slot_count(); ++s) pool_->Bind(s, fixed_);
  status_ = "io_uring: " + std::to_string(rings_.size()) + " rings, queue depth " +
            std::to_string(qd) + (fixed_ ? ", fixed buffers" : ", unregistered buffers" + why) +
            (options_.use_direct ? ", O_DIRECT where allowed" : ", buffered");
}

UringReader::Ring* UringReader::AcquireRing() {
  size_t n = rings_.size();
  size_t start = next_ring_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    Ring* r = rings_[(start + i) % n].get();
    if (r->mu.TryLock()) return r;
  }
  return nullptr;
}

void UringReader::ReapLate(Ring& ring) {
  ring.mu.AssertHeld();  // REQUIRES (the header cannot say it: Ring is private to this file)
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring.ring, &cqe) == 0 && cqe != nullptr) {
    uint64_t id = io_uring_cqe_get_data64(cqe);
    io_uring_cqe_seen(&ring.ring, cqe);
    auto it = ring.orphans.find(id);
    if (it == ring.orphans.end()) continue;  // a cancellation's own completion
    pool_->AttestDrained(it->second);        // the kernel is done with the slot
    ring.orphans.erase(it);
    late_.fetch_add(1, std::memory_order_relaxed);
  }
}

void UringReader::Poll() {
  for (auto& r : rings_) {
    if (!r->mu.TryLock()) continue;
    ReapLate(*r);
    r->mu.Unlock();
  }
}

StatusCode UringReader::Read(const ReadTarget& target, uint64_t offset, std::span<uint8_t> out) {
  if (out.empty()) return StatusCode::kOk;
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (options_.page_cache_first && !rings_.empty() && Cached(target.fd, offset, out.size())) {
    cached_reads_.fetch_add(1, std::memory_order_relaxed);
    return PreadFull(target.fd, out, offset);  // from memory; an eviction since only costs time
  }
  if (Ring* ring = rings_.empty() ? nullptr : AcquireRing()) {
    ring->mu.AssertHeld();  // AcquireRing took it
    MutexLock lock(ring->mu, std::adopt_lock);
    ReapLate(*ring);
    return ReadOnRing(*ring, target, offset, out);
  }
  pread_reads_.fetch_add(1, std::memory_order_relaxed);
  return PreadFull(target.fd, out, offset);
}

StatusCode UringReader::ReadOnRing(Ring& ring, const ReadTarget& target, uint64_t offset,
                                   std::span<uint8_t> out) {
  const bool direct = options_.use_direct && target.direct_fd >= 0;
  const int fd = direct ? target.direct_fd : target.fd;
  const uint64_t end = offset + out.size();
  // O_DIRECT: the aligned superset of the range (a tail past EOF comes back short).
  const uint64_t a0 = direct ? AlignDown(offset) : offset;
  const uint64_t a1 = direct ? AlignUp(end) : end;
  if (direct && options_.direct_into_out && a0 == offset && a1 == end &&
      reinterpret_cast<uintptr_t>(out.data()) % kAlign == 0) {
    uring_reads_.fetch_add(1, std::memory_order_relaxed);
    return ReadIntoOut(ring, fd, offset, out);
  }
  const uint64_t slot = pool_->slot_bytes();
  uint64_t pos = a0;
  while (pos < a1) {
    size_t batch = std::min<uint64_t>((a1 - pos + slot - 1) / slot, options_.queue_depth);
    LeaseInfo info{reinterpret_cast<uintptr_t>(&ring), NowNs() + 2 * options_.timeout_ns};
    auto leases = pool_->Checkout(batch, info);
    if (!leases.ok() && batch > 1) leases = pool_->Checkout(1, info);
    if (!leases.ok()) {  // every slot busy or quarantined: pread the rest
      pread_reads_.fetch_add(1, std::memory_order_relaxed);
      uint64_t from = std::max(pos, offset);
      return PreadFull(target.fd, out.subspan(from - offset), from);
    }
    std::vector<Piece> pieces;
    for (const SlotLease& l : leases.value()) {
      Piece p;
      p.pos = pos;
      p.len = static_cast<uint32_t>(std::min<uint64_t>(slot, a1 - pos));
      p.buf = pool_->Buffer(l.slot).data();
      p.id = l.id;
      p.lease = l;
      pieces.push_back(p);
      pos += p.len;
    }
    StatusCode s = RunBatch(ring, fd, direct, pieces);
    for (const Piece& p : pieces) {
      if (s != StatusCode::kOk || p.unknown) continue;
      uint64_t from = std::max(p.pos, offset), to = std::min<uint64_t>(p.pos + p.len, end);
      if (from >= to) continue;
      if (p.pos + p.got < to) {  // EOF inside the range the caller wants
        s = StatusCode::kIoError;
        continue;
      }
      std::memcpy(out.data() + (from - offset), p.buf + (from - p.pos), to - from);
    }
    for (const Piece& p : pieces) {
      if (!p.unknown) pool_->Release(p.lease);
    }
    if (s != StatusCode::kOk) {
      bool retry = std::any_of(pieces.begin(), pieces.end(),
                               [](const Piece& p) { return PreadMayServe(p.err); });
      if (!retry) return s;
      pread_reads_.fetch_add(1, std::memory_order_relaxed);
      return PreadFull(target.fd, out, offset);
    }
  }
  uring_reads_.fetch_add(1, std::memory_order_relaxed);
  return StatusCode::kOk;
}

StatusCode UringReader::ReadIntoOut(Ring& ring, int fd, uint64_t offset, std::span<uint8_t> out) {
  static std::atomic<uint64_t> next_id{1};
  const uint64_t chunk = pool_->slot_bytes();
  uint64_t pos = 0;
  while (pos < out.size()) {
    std::vector<Piece> pieces;
    while (pos < out.size() && pieces.size() < options_.queue_depth) {
      Piece p;
      p.pos = offset + pos;
      p.len = static_cast<uint32_t>(std::min<uint64_t>(chunk, out.size() - pos));
      p.buf = out.data() + pos;
      p.id = kIntoOutTag | next_id.fetch_add(1, std::memory_order_relaxed);
      pieces.push_back(p);
      pos += p.len;
    }
    StatusCode s = RunBatch(ring, fd, true, pieces);
    if (s != StatusCode::kOk) return s;
    for (const Piece& p : pieces) {
      if (p.got < p.len) return StatusCode::kIoError;
    }
  }
  return StatusCode::kOk;
}

// One batch of pieces in flight on a ring: submission, completions (short reads resubmitted),
// the timeout and what becomes of each slot. Lives for one RunBatch call, on the caller's stack.
class UringReader::Batch {
 public:
  Batch(UringReader& reader, Ring& ring, int fd, bool direct, std::vector<Piece>& pieces)
      : reader_(reader), ring_(ring), fd_(fd), direct_(direct), pieces_(pieces),
        pending_(pieces.size()) {}

  StatusCode Run() {
    for (Piece& p : pieces_) Submit(p);
    if (io_uring_submit(&ring_.ring) < 0) {
      // The SQEs may still sit in the ring and be submitted later: their completions are unknown.
      for (Piece& p : pieces_) p.unknown = true;
      return Resolve(false);
    }
    if (WaitUntil(NowNs() + reader_.options_.timeout_ns, true)) return Resolve(false);
    reader_.timeouts_.fetch_add(1, std::memory_order_relaxed);
    if (!reader_.options_.TEST_skip_cancel) CancelPending();
    if (pieces_.front().lease.id == 0) {
      // The target is the caller's memory: it cannot be quarantined, so wait for the end.
      while (pending_ > 0) {
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(&ring_.ring, &cqe) == 0) Drain(false);
      }
    } else {
      WaitUntil(NowNs() + reader_.options_.cancel_grace_ns, false);
    }
    for (Piece& p : pieces_) p.unknown = p.unknown || !p.done;
    return Resolve(true);
  }

 private:
  void Submit(Piece& p) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_.ring);
    if (sqe == nullptr) {
      io_uring_submit(&ring_.ring);
      sqe = io_uring_get_sqe(&ring_.ring);
    }
    if (sqe == nullptr) {  // cannot happen with at most queue_depth pieces; fail, never hang
      Finish(p, EBUSY);
      return;
    }
    if (p.lease.id != 0 && p.lease.bound) {
      io_uring_prep_read_fixed(sqe, fd_, p.buf + p.got, p.len - p.got, p.pos + p.got,
                               static_cast<int>(p.lease.slot));
    } else {
      io_uring_prep_read(sqe, fd_, p.buf + p.got, p.len - p.got, p.pos + p.got);
    }
    io_uring_sqe_set_data64(sqe, p.id);
  }

  void Finish(Piece& p, int err) {
    p.err = err;
    p.done = true;
    pending_--;
  }

  // One completion; false when it belongs to none of the pieces.
  bool Complete(uint64_t id, int res, bool may_resubmit) {
    auto it = std::find_if(pieces_.begin(), pieces_.end(),
                           [&](const Piece& p) { return p.id == id && !p.done; });
    if (it == pieces_.end()) return false;
    Piece& p = *it;
    if ((res == -EAGAIN || res == -EINTR) && may_resubmit) {
      Submit(p);
      return true;
    }
    if (res < 0) {
      Finish(p, -res);
      return true;
    }
    p.got += static_cast<uint32_t>(res);
    // A short read: resubmit the rest unless it is EOF (0, or a direct read ending unaligned).
    if (res > 0 && p.got < p.len && may_resubmit && (!direct_ || p.got % kAlign == 0)) {
      Submit(p);
      return true;
    }
    Finish(p, 0);
    return true;
  }

  void Drain(bool may_resubmit) {
    ring_.mu.AssertHeld();  // a batch runs only on a ring its caller holds
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_.ring, &cqe) == 0 && cqe != nullptr) {
      uint64_t id = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(&ring_.ring, cqe);
      if (Complete(id, res, may_resubmit)) continue;
      if (auto o = ring_.orphans.find(id); o != ring_.orphans.end()) {  // an earlier read's
        reader_.pool_->AttestDrained(o->second);
        ring_.orphans.erase(o);
        reader_.late_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (may_resubmit) io_uring_submit(&ring_.ring);
  }

  bool WaitUntil(uint64_t deadline, bool may_resubmit) {
    while (pending_ > 0) {
      uint64_t now = NowNs();
      if (now >= deadline) return false;
      __kernel_timespec ts = Timespec(deadline - now);
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe_timeout(&ring_.ring, &cqe, &ts);
      if (r < 0 && r != -EINTR) return false;  // -ETIME, or the ring itself failing
      Drain(may_resubmit);
    }
    return true;
  }

  void CancelPending() {
    for (Piece& p : pieces_) {
      if (p.done) continue;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_.ring);
      if (sqe == nullptr) break;
      io_uring_prep_cancel64(sqe, p.id, 0);
      io_uring_sqe_set_data64(sqe, 0);
    }
    io_uring_submit(&ring_.ring);
  }

  // A read past its timeout fails even if the cancelled completion brought every byte.
  StatusCode Resolve(bool timed_out) {
    ring_.mu.AssertHeld();  // a batch runs only on a ring its caller holds
    StatusCode s = timed_out ? StatusCode::kIoError : StatusCode::kOk;
    for (Piece& p : pieces_) {
      if (p.unknown) {
        // Completion unknown: the kernel may still write into the slot. Quarantine it; its late
        // completion (reaped by this ring's next user) attests it drained.
        if (reader_.pool_->MarkUnknown(p.lease) == StatusCode::kOk) {
          ring_.orphans.emplace(p.id, p.lease);
        }
        s = StatusCode::kIoError;
      } else if (p.err != 0 && s == StatusCode::kOk) {
        s = StatusFromErrno(p.err);
      }
    }
    return s;
  }

  UringReader& reader_;
  Ring& ring_;
  const int fd_;
  const bool direct_;
  std::vector<Piece>& pieces_;
  size_t pending_;
};

StatusCode UringReader::RunBatch(Ring& ring, int fd, bool direct, std::vector<Piece>& pieces) {
  if (pieces.empty()) return StatusCode::kOk;
  return Batch(*this, ring, fd, direct, pieces).Run();
}

UringReaderStats UringReader::stats() const {
  UringReaderStats s;
  s.uring = !rings_.empty();
  s.fixed_buffers = fixed_ && s.uring;
  s.status = status_;
  s.queue_depth = s.uring ? options_.queue_depth : 0;
  s.rings = rings_.size();
  s.reads = reads_.load();
  s.uring_reads = uring_reads_.load();
  s.pread_reads = pread_reads_.load();
  s.page_cache_reads = cached_reads_.load();
  s.timeouts = timeouts_.load();
  s.late_completions = late_.load();
  s.pool = pool_->Counters();
  return s;
}

}  // namespace gpucache
