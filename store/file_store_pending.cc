// FileMedium: a reservation's payload, from its temporary file to the published block.
//
// Prepare takes a spare file (store/spare_pool.h) and writes the payload where it lies
// in spare/, or creates tmp/<region>.part when no spare is ready. Writes land at
// kBlockDataOffset + offset and feed the payload's checksums as they arrive
// (ArrivalHasher, store/checksum.h); Seal reads back only what the writes could not feed (a
// block written out of order, overwritten, or over 256 MiB), writes the header and renames the
// file into place. The checksums are of the bytes the writer sent, and every read of the
// committed block is verified against them as before.

#include <algorithm>
#include <atomic>

#include "store/env.h"
#include "store/failpoint.h"
#include "store/file_store.h"
#include "store/located_file.h"
#include "store/spare_pool.h"

namespace gpucache {
namespace {

constexpr size_t kSealReadSize = 1 << 20;

class PendingFile final : public PendingPayload {
 public:
  PendingFile(Fd f, std::string p, size_t d) : fd(std::move(f)), path(std::move(p)), dev(d) {}
  Fd fd;
  std::string path;
  const size_t dev;  // the directory it will be published in
  ArrivalHasher arrival;
  // The payload bytes below this are written or allocated already: writing there again takes
  // no more of the device (min_free_percent counts only what lies past it).
  std::atomic<uint64_t> held_end{0};
  uint64_t NewBytes(uint64_t end) const { return end - std::min(end, held_end.load()); }
  void Hold(uint64_t end) {
    uint64_t was = held_end.load();
    while (was < end && !held_end.compare_exchange_weak(was, end)) {
    }
  }
};

}  // namespace

Result<std::shared_ptr<PendingPayload>> FileMedium::Prepare(const ReservationInfo& info) {
  size_t dev = devices_.PlaceFor(info.address);  // the payload is written where it will be published
  // A spare is written where it lies (moving it into tmp/ measured slower than creating a
  // file there); Seal renames it into blocks/ like any .part, Discard unlinks it.
  if (std::optional<SpareFile> spare = spares_ ? spares_->Take(dev) : std::nullopt) {
    GPUCACHE_FAILPOINT("reserve.after_create");
    return std::shared_ptr<PendingPayload>(
        std::make_shared<PendingFile>(std::move(spare->fd), std::move(spare->path), dev));
  }
  std::string path = devices_.dir(dev).Part(info.region_id);
  Fd fd(env_.CreateExclusive(path));
  if (!fd.valid()) return StatusFromErrno(-fd.get());
  GPUCACHE_FAILPOINT("reserve.after_create");
  return std::shared_ptr<PendingPayload>(std::make_shared<PendingFile>(std::move(fd), path, dev));
}

// One statfs per write while min_free_percent is set: a microsecond against a FUSE round trip,
// and the only way to see what else on the filesystem (logs, another service) took meanwhile.
// `bytes` are only those past what the fill wrote or allocated already (PendingFile::NewBytes).
bool FileMedium::WouldEatKeptFree(size_t dev, uint64_t bytes) {
  if (options_.min_free_percent <= 0) return false;
  Result<FsSpace> space = env_.SpaceOf(devices_.dir(dev).root());
  return space.ok() && space->free_bytes < bytes + devices_.KeptFree(space->total_bytes);
}

Result<size_t> FileMedium::Write(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) {
  auto& f = static_cast<PendingFile&>(p);
  // Refused like a full device's ENOSPC: the store then evicts from this device and writes again.
  if (WouldEatKeptFree(f.dev, f.NewBytes(offset + data.size()))) return StatusCode::kNoSpace;
  uint64_t ticket = f.arrival.Begin();
  if (GPUCACHE_FAILPOINT_FIRES("write.torn")) {  // half of this request lands, then the crash
    env_.Write(f.fd.get(), data.first(data.size() / 2), kBlockDataOffset + offset);
    failpoint::Crash("write.torn");
  }
  StatusCode s = env_.Write(f.fd.get(), data, kBlockDataOffset + offset);
  f.arrival.EndWrite(ticket, offset, data, s == StatusCode::kOk);
  if (s != StatusCode::kOk) return s;
  f.Hold(offset + data.size());
  GPUCACHE_FAILPOINT("write.after");
  return data.size();
}

StatusCode FileMedium::Truncate(PendingPayload& p, uint64_t size) {
  auto& f = static_cast<PendingFile&>(p);
  uint64_t ticket = f.arrival.Begin();
  StatusCode s = env_.Truncate(f.fd.get(), kBlockDataOffset + size);
  f.arrival.EndResize(ticket, size);
  // A shrink gives back what lay past `size`; a sparse extension allocates nothing.
  if (s == StatusCode::kOk && size < f.held_end.load()) f.held_end.store(size);
  return s;
}

StatusCode FileMedium::Allocate(PendingPayload& p, uint64_t size) {
  auto& f = static_cast<PendingFile&>(p);
  // Only the growth: what was written or allocated below it holds its space already.
  if (WouldEatKeptFree(f.dev, f.NewBytes(size))) return StatusCode::kNoSpace;
  uint64_t ticket = f.arrival.Begin();
  StatusCode s = env_.Allocate(f.fd.get(), kBlockDataOffset, size);  // grows only
  f.arrival.EndResize(ticket, size);
  if (s == StatusCode::kOk) f.Hold(size);
  return s == StatusCode::kNotSupported ? Truncate(p, size) : s;
}

std::optional<Medium::DeviceSpace> FileMedium::SpaceFor(const PendingPayload& p) {
  Result<FsSpace> space = env_.SpaceOf(devices_.dir(static_cast<const PendingFile&>(p).dev).root());
  if (!space.ok()) return std::nullopt;
  // What fills may still take: the room eviction must make is counted against this.
  // Fair shares are of what fills may use of the device, too (Admission::RoomOnDevice).
  uint64_t kept = devices_.KeptFree(space->total_bytes);
  return DeviceSpace{space->free_bytes - std::min(space->free_bytes, kept), space->total_bytes - kept,
                     kept - std::min(space->free_bytes, kept)};
}

bool FileMedium::SharesDevice(const PendingPayload& p, const StoredPayload* stored) const {
  return DeviceOf(stored) == static_cast<const PendingFile&>(p).dev;
}

Result<PayloadChecksums> FileMedium::ChecksumsOf(PendingPayload& p, uint64_t size) {
  auto& f = static_cast<PendingFile&>(p);
  uint64_t at = 0;
  std::unique_ptr<PayloadHasher> hasher = f.arrival.Take(ChunkSizeFor(size), &at);
  if (at > size) {  // cannot happen (a shrink restarts the hasher); never trust it if it did
    hasher = std::make_unique<PayloadHasher>(ChunkSizeFor(size));
    at = 0;
  }
  read_back_bytes_.fetch_add(size - at, std::memory_order_relaxed);
  Bytes buf(std::min<uint64_t>(size - at, kSealReadSize));
  for (; at < size; at += buf.size()) {
    std::span<uint8_t> piece(buf.data(), std::min<uint64_t>(buf.size(), size - at));
    if (StatusCode s = env_.Read(f.fd.get(), piece, kBlockDataOffset + at); s != StatusCode::kOk) {
      return s;
    }
    hasher->Update(piece);
  }
  return hasher->Finish();
}

Result<Medium::Sealed> FileMedium::Seal(PendingPayload& p, const BlockInfo& draft,
                                        std::optional<BlockLocation>& read_failed) {
  auto& f = static_cast<PendingFile&>(p);
  if (devices_.Isolated(f.dev)) return StatusCode::kIoError;  // its device left service meanwhile
  // Cut anything past the payload (a truncate to a smaller size leaves nothing behind).
  if (StatusCode s = Truncate(p, draft.size); s != StatusCode::kOk) return s;
  GPUCACHE_FAILPOINT("seal.after_truncate");
  Result<PayloadChecksums> sums = ChecksumsOf(p, draft.size);
  if (!sums.ok()) {
    // Reading back what was just written failed: as much a failing device as a block's read.
    if (sums.status() == StatusCode::kIoError) {
      read_failed = BlockLocation{f.dev, devices_.dir(f.dev).root(), f.path};
    }
    return sums.status();
  }
  BlockHeader header;
  header.payload_length = draft.size;
  header.commit_epoch = draft.commit_epoch;
  header.region_id = draft.region_id;
  header.owner_uid = draft.owner.uid;
  header.owner_gid = draft.owner.gid;
  header.commit_time_ns = draft.commit_time_ns;
  header.identity = draft.canonical_identity;
  header.checksums = std::move(sums.value());
  GPUCACHE_FAILPOINT("seal.after_checksums");
  Bytes encoded = EncodeBlockHeader(header);
  if (GPUCACHE_FAILPOINT_FIRES("seal.torn_header")) {  // half a header, then the crash
    env_.Write(f.fd.get(), std::span(encoded).first(encoded.size() / 2), 0);
    failpoint::Crash("seal.torn_header");
  }
  if (StatusCode s = env_.Write(f.fd.get(), encoded, 0); s != StatusCode::kOk) return s;
  GPUCACHE_FAILPOINT("seal.after_header");
  if (options_.sync_commits) {
    if (StatusCode s = env_.SyncData(f.fd.get()); s != StatusCode::kOk) return s;
  }
  std::string target = PathIn(f.dev, draft.address);
  GPUCACHE_FAILPOINT("seal.before_rename");
  if (StatusCode s = env_.Rename(f.path, target); s != StatusCode::kOk) return s;
  GPUCACHE_FAILPOINT("seal.after_rename");
  if (options_.sync_commits) {
    // Not acknowledged unless the name is durable too: a commit whose directory sync failed
    // takes its file back (found by the power-loss test, tests/store/power_loss_test.cc).
    if (StatusCode s = env_.SyncDir(target.substr(0, target.find_last_of('/'))); s != StatusCode::kOk) {
      env_.Remove(target);
      f.path.clear();
      return s;
    }
  }
  JournalCommit(f.dev, f.fd.get(), draft, header.checksums);
  f.fd.Reset();
  f.path.clear();
  return Sealed{std::move(header.checksums), located_[f.dev]};
}

void FileMedium::Discard(PendingPayload& p) {
  auto& f = static_cast<PendingFile&>(p);
  f.fd.Reset();
  if (!f.path.empty()) env_.Remove(f.path);
}

}  // namespace gpucache
