// Filesystem: the commit channel, `.gpucache/commit` (adr/0022, docs/control-protocol.md).
//
// A frame (common/commit_frame.h) is a whole block: its path, its identity and its payload. The
// daemon runs the commit protocol on the writer's behalf with the store's own steps (Reserve,
// SetIdentity, Write, Commit), so everything a `.part` and its rename promise holds: the same
// single-flight, quotas, eviction, fencing and identity checks, the same errnos. A frame of up
// to the mount's max_write is one FUSE request; the kernel splits a longer one into requests in
// order (the header always whole in the first), and the write that brings the last byte commits. Any failure abandons the fill, and
// the frame's later writes hear the same errno (a write loop that retries a short write hears
// why); a write at offset 0 starts a new frame.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "fs/filesystem.h"
#include "store/block_file.h"
#include "store/identity.h"
#include "store/layout.h"

namespace gpucache {
namespace {

// As the clients do: from this size a fill declares its size first, so that a block that cannot
// fit is refused before any of it is written (docs/eviction.md, "A full disk").
constexpr uint64_t kDeclareSizeFrom = 1 << 20;

// A frame may carry no identity the store would refuse anyway: none is held for nothing.
static_assert(commit_frame::kMaxFrameIdentity == kMaxIdentityBytes);

// Tests only: how long a committed frame waits before the kernel is told of its block
// (tests/mount/stop_test.cc stops the daemon meanwhile); 0 unless GPUCACHE_TEST_HOLD_APPEARED_MS
// is set.
void HoldAppearedForTests() {
  static const int ms = [] {
    const char* v = std::getenv("GPUCACHE_TEST_HOLD_APPEARED_MS");
    return v ? std::atoi(v) : 0;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace

Result<size_t> Filesystem::WriteFrame(const Principal& writer, Handle& h, uint64_t offset,
                                      std::span<const uint8_t> data) {
  // Frames are authorized by their writer, who must also be the opener, and as the opener: a
  // descriptor handed to a more privileged process (a root helper, a setgid one writing into a
  // caller's fd) commits nothing (review, 2026-12-07: a setgid helper's group was honoured).
  std::optional<Principal> opener = AsOpener(writer, h);
  if (!opener) return StatusCode::kAccessDenied;
  const Principal& c = *opener;
  std::optional<BlockAddress> committed;
  {
    MutexLock lock(h.mu);
    FrameState& f = h.frame;
    // Refusals are counted under the frame's tenant: a block over one request (max_write) meets
    // its commit, and any refusal of it, in a later write than the header's.
    // (Not a new frame's: offset 0 starts another, whose header names its own.)
    if (offset != 0 && !f.address.tenant.empty()) Metrics::NoteTenant(f.address.tenant);
    // Writes to one open run in parallel: a frame in progress belongs to the thread that wrote
    // its header. Another thread's write neither restarts it nor adds to it, and changes nothing
    // (a second frame at offset 0 would otherwise drop the first, whose later writes then went
    // into the second: a block of both payloads, and its writer told its own was committed).
    const bool in_progress = f.received > 0 && !f.done && f.failed == StatusCode::kOk;
    if (in_progress && c.thread != f.thread) return StatusCode::kBusy;
    // Thread 0: the kernel could not name the writer (a writer outside the daemon's pid
    // namespace), so every thread looks alike. A frame in progress is then never restarted:
    // its continuation is told by its offset, a new header at 0 is another thread's as likely
    // (review, 2026-12-07: a daemon in a container committed a block of two threads' payloads).
    if (in_progress && c.thread == 0 && offset == 0) return StatusCode::kBusy;
    if (offset == 0) {
      AbandonFrame(f);
      f = FrameState{};
      f.thread = c.thread;
    } else if (f.failed != StatusCode::kOk) {
      Metrics::NoteRepeatedRefusal();
      return f.failed;
    } else if (f.done || f.received == 0 || offset != f.received) {
      // Frames are written in order, one at a time per open file (not with AIO, which may send
      // a write's pieces out of order).
      return FailFrame(f, StatusCode::kInvalidArgument);
    } else if (StatusCode s = StillMayCommit(c, f); s != StatusCode::kOk) {
      // A reload may have taken the writer out of the tenant since the header: as a `.part`,
      // whose rename is refused then, it commits nothing.
      return FailFrame(f, s);
    }
    if (data.empty()) return size_t{0};
    if (StatusCode s = TakeFrameBytes(c, f, data); s != StatusCode::kOk) return FailFrame(f, s);
    if (f.done) committed = f.address;
  }
  // The kernel may cache a miss for the name (a probe before the block was computed) and saw no
  // rename: it is told before the write returns, as a rename would have left it, so the writer's
  // next stat finds the block. Not under the handle's lock: the notice may wait for the
  // namespace directory's lock, which a LOOKUP there holds until one of the daemon's threads
  // answers it, and other writes of this open may be waiting for the handle meanwhile
  // (Filesystem::BlockAppeared bounds how many wait at once).
  if (committed) {
    HoldAppearedForTests();
    BlockAppeared(*committed, /*now=*/true);
  }
  return data.size();
}

// The header must be whole in the frame's first write (received is 0 until it was), so that no
// open holds a header's bytes between writes (one open per process fd, each buffering a part of
// a header, would let one caller pin the daemon's memory). A write of at least the header's
// length always is: the kernel cuts a write into requests of up to max_write (1 MiB), and a
// header is at most 17 KiB.
StatusCode Filesystem::TakeFrameBytes(const Principal& c, FrameState& f, std::span<const uint8_t> data) {
  if (f.received == 0) {
    if (!commit_frame::ParseHeader(data, f.header)) return StatusCode::kInvalidArgument;
    f.received = f.header.header_bytes;
    data = data.subspan(f.header.header_bytes);
    if (StatusCode s = OpenFrameFill(c, f); s != StatusCode::kOk) return s;
  }
  return TakeFramePayload(f, data);
}

// The frame's header is complete: the caller's right to its tenant, the names' shape, then the
// fill, as a CREATE of `<block>.part` and the identity's setxattr would make it.
StatusCode Filesystem::OpenFrameFill(const Principal& c, FrameState& f) {
  std::optional<commit_frame::PathParts> parts = commit_frame::SplitPath(f.header.path);
  if (!parts || !IsValidTenantName(parts->tenant) || !IsValidNamespaceName(parts->ns) ||
      !IsValidBlockName(parts->block)) {
    return StatusCode::kInvalidArgument;
  }
  if (!access_.IsTenant(parts->tenant)) return StatusCode::kNotFound;
  Metrics::NoteTenant(parts->tenant);
  if (!access_.MayUseTenant(c, parts->tenant)) return StatusCode::kAccessDenied;
  f.address = BlockAddress{std::string(parts->tenant), std::string(parts->ns), std::string(parts->block)};
  // The frame is the only way into this fill: no `.part` open, truncate or rename reaches it.
  Result<ReservationId> id = store_.ReserveForDaemon(f.address, Owner{c.uid, c.gid});
  if (!id.ok()) return id.status();
  f.fill = id.value();
  if (StatusCode s = store_.OpenWriter(f.fill); s != StatusCode::kOk) return FillAnswer(s, f.address);
  f.writing = true;
  if (StatusCode s = store_.SetIdentity(f.fill, f.header.identity); s != StatusCode::kOk) {
    return FillAnswer(s, f.address);
  }
  f.header.identity = {};  // the fill holds it now
  if (f.header.payload_bytes >= kDeclareSizeFrom) {
    if (StatusCode s = store_.Truncate(f.fill, f.header.payload_bytes); s != StatusCode::kOk) {
      return FillAnswer(s, f.address);
    }
  }
  return StatusCode::kOk;
}

StatusCode Filesystem::StillMayCommit(const Principal& c, const FrameState& f) const {
  if (!access_.IsTenant(f.address.tenant)) return StatusCode::kNotFound;
  if (!access_.MayUseTenant(c, f.address.tenant)) return StatusCode::kAccessDenied;
  return StatusCode::kOk;
}

StatusCode Filesystem::TakeFramePayload(FrameState& f, std::span<const uint8_t> data) {
  const uint64_t at = f.received - f.header.header_bytes;
  if (data.size() > f.header.payload_bytes - at) return StatusCode::kInvalidArgument;  // past its end
  if (!data.empty()) {
    Result<size_t> n = store_.Write(f.fill, at, data);
    if (!n.ok()) return FillAnswer(n.status(), f.address);
    if (n.value() != data.size()) return StatusCode::kIoError;
    metrics_.RecordWrite(f.address.tenant, n.value());
    f.received += data.size();
  }
  return at + data.size() == f.header.payload_bytes ? CommitFrame(f) : StatusCode::kOk;
}

StatusCode Filesystem::CommitFrame(FrameState& f) {
  store_.CloseWriter(f.fill);
  f.writing = false;
  if (StatusCode s = store_.Commit(f.fill); s != StatusCode::kOk) {
    if (s == StatusCode::kInvalidArgument) LogInvalidCommit(f.address, f.fill);
    return FillAnswer(s, f.address);
  }
  f.fill = 0;
  f.done = true;
  f.header = {};
  if (ram_) ram_->Committed(f.address);
  return StatusCode::kOk;
}

StatusCode Filesystem::FailFrame(FrameState& f, StatusCode s) {
  AbandonFrame(f);
  f.header = {};  // a failed frame keeps nothing but its answer
  f.failed = s;
  return s;
}

void Filesystem::AbandonFrame(FrameState& f) {
  if (f.fill == 0) return;
  if (f.writing) store_.CloseWriter(f.fill);
  f.writing = false;
  store_.Abort(f.fill);  // a fill a fence already ended answers kNotFound: nothing to give back
  f.fill = 0;
}

}  // namespace gpucache
