#include "store/ram_tier.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace gpucache {
namespace {

// Bytes read through the verifying reader per call: whole 64 KiB chunks, so no chunk is
// verified twice.
constexpr size_t kCopySlice = 1 << 20;

// What a copy takes of the tmpfs: whole pages. Counting these, the tier never asks the tmpfs
// (sized to the budget) for more than it has.
constexpr uint64_t kPage = 4096;
uint64_t Footprint(uint64_t size) { return (size + kPage - 1) / kPage * kPage; }

}  // namespace

RamTier::RamTier(Fd dir, uint64_t budget_bytes, Env& env, size_t max_copies)
    : env_(env), dir_(std::move(dir)), budget_(budget_bytes), max_copies_(max_copies) {
  MutexLock lock(mu_);
  stats_.budget_bytes = budget_;
}

void RamPromotionFailures::Count(StatusCode why) {
  switch (why) {
    case StatusCode::kChecksumMismatch: checksum++; break;
    case StatusCode::kNoSpace: no_space++; break;
    case StatusCode::kNotFound: left++; break;
    default: io++; break;
  }
}

StatusCode RamTier::Promote(const BlockAddress& address, uint64_t region_id, BlockReader& reader) {
  const std::string key = address.RelativePath();
  const uint64_t size = reader.info().size;
  {
    MutexLock lock(mu_);
    if (StatusCode s = BeginLocked(key, region_id, Footprint(size)); s != StatusCode::kOk) return s;
  }
  Result<Fd> fd = CopyOut(reader, size);  // the slow part, without the lock
  MutexLock lock(mu_);
  if (!fd.ok()) {
    EndLocked(key, nullptr);
    stats_.failed_by.Count(fd.status());
    return fd.status();
  }
  return EndLocked(key, MakeCopy(std::move(fd.value()), size, region_id));
}

std::shared_ptr<const RamCopy> RamTier::MakeCopy(Fd fd, uint64_t size, uint64_t region_id) const {
  const uint64_t bytes = Footprint(size);
  live_bytes_->fetch_add(bytes);
  live_files_->fetch_add(1);
  return std::shared_ptr<const RamCopy>(new RamCopy(std::move(fd), size, region_id),
                                        [live = live_bytes_, files = live_files_, bytes](const RamCopy* copy) {
                                          delete copy;  // its last descriptor: tmpfs frees the pages
                                          live->fetch_sub(bytes);
                                          files->fetch_sub(1);
                                        });
}

bool RamTier::NeverFits(uint64_t size) {
  if (Footprint(size) <= budget_) return false;
  MutexLock lock(mu_);
  stats_.too_large++;
  return true;
}

StatusCode RamTier::BeginLocked(const std::string& key, uint64_t region_id, uint64_t bytes) {
  if (closed_) return StatusCode::kNotSupported;
  if (auto it = in_flight_.find(key); it != in_flight_.end()) {
    return it->second.region_id == region_id ? StatusCode::kExists : StatusCode::kExhausted;
  }
  if (auto it = copies_.find(key); it != copies_.end()) {
    if (it->second.copy->region_id() == region_id) return StatusCode::kExists;
    DropLocked(it);  // an older block at this address: never served again
  }
  if (bytes > budget_) {  // NeverFits keeps such blocks off the queue; one replaced since may be
    stats_.too_large++;
    return StatusCode::kTooLarge;
  }
  if (!MakeRoomLocked(bytes)) return StatusCode::kExhausted;
  in_flight_[key] = InFlight{region_id, bytes, false};
  in_flight_bytes_ += bytes;
  return StatusCode::kOk;
}

bool RamTier::FitsLocked(uint64_t bytes) const {
  // Every kept copy still open anywhere, not only those held: that is what the tmpfs holds.
  return live_bytes_->load() + in_flight_bytes_ + bytes <= budget_ &&
         live_files_->load() + in_flight_.size() < max_copies_;  // one more descriptor
}

// A copy someone else holds (a passthrough table's backing file, its open files behind it) is
// skipped: dropping it would free no tmpfs page until they close, so the budget would not gain
// what the new copy's fallocate then fails to find (kNoSpace), and the copy lost would be one
// in use. Only Find hands out references, under mu_, so a count of 1 seen here stays 1.
bool RamTier::MakeRoomLocked(uint64_t bytes) {
  for (auto it = lru_.end(); !FitsLocked(bytes) && it != lru_.begin();) {
    --it;
    auto victim = copies_.find(*it);
    if (victim->second.copy.use_count() > 1) continue;  // open: dropping it frees nothing
    ++it;  // DropLocked erases the victim's node; go on from the one after it
    DropLocked(victim);
    stats_.evictions++;
  }
  return FitsLocked(bytes);
}

void RamTier::DropLocked(std::unordered_map<std::string, Entry>::iterator it) {
  stats_.bytes_held -= Footprint(it->second.copy->size());
  stats_.copies--;
  lru_.erase(it->second.lru);
  // The file lives on while a passthrough open still holds its descriptor, and its bytes stay
  // counted against the budget until then (MakeCopy's deleter).
  copies_.erase(it);
}

StatusCode RamTier::EndLocked(const std::string& key, std::shared_ptr<const RamCopy> copy) {
  auto it = in_flight_.find(key);
  InFlight done = it->second;
  in_flight_.erase(it);
  in_flight_bytes_ -= done.bytes;
  if (!copy) return StatusCode::kOk;  // the caller says why
  if (done.forgotten) {
    stats_.failed_by.Count(StatusCode::kNotFound);
    return StatusCode::kNotFound;
  }
  lru_.push_front(key);
  copies_[key] = Entry{std::move(copy), lru_.begin()};
  stats_.bytes_held += done.bytes;
  stats_.copies++;
  stats_.promotions++;
  return StatusCode::kOk;
}

Result<Fd> RamTier::CopyOut(BlockReader& reader, uint64_t size) const {
  int created = env_.CreateNameless(dir_.get());
  if (created < 0) return StatusFromErrno(-created);
  Fd fd(created);
  // Every page first: a tmpfs too full for the copy says so now, before anything is read.
  if (size > 0) {
    StatusCode s = env_.Allocate(fd.get(), 0, size);
    if (s == StatusCode::kNotSupported) s = env_.Truncate(fd.get(), size);
    if (s != StatusCode::kOk) return s;
  }
  std::vector<uint8_t> buf(std::min<uint64_t>(size, kCopySlice));
  for (uint64_t at = 0; at < size;) {
    std::span<uint8_t> slice(buf.data(), std::min<uint64_t>(buf.size(), size - at));
    Result<size_t> n = reader.Read(at, slice);  // verified, or refused
    if (!n.ok()) return n.status();
    if (n.value() == 0) return StatusCode::kIoError;  // shorter than the index says
    if (StatusCode s = env_.Write(fd.get(), slice.first(n.value()), at); s != StatusCode::kOk) return s;
    at += n.value();
  }
  return fd;
}

RamTier::Entry* RamTier::CopyLocked(const std::string& key, uint64_t region_id) {
  auto it = copies_.find(key);
  return it != copies_.end() && it->second.copy->region_id() == region_id ? &it->second : nullptr;
}

std::shared_ptr<const RamCopy> RamTier::Find(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  Entry* e = CopyLocked(address.RelativePath(), region_id);
  if (!e) return nullptr;
  lru_.splice(lru_.begin(), lru_, e->lru);
  return e->copy;
}

void RamTier::Touch(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  stats_.hits++;
  if (Entry* e = CopyLocked(address.RelativePath(), region_id)) lru_.splice(lru_.begin(), lru_, e->lru);
}

bool RamTier::Holds(const BlockAddress& address, uint64_t region_id) {
  const std::string key = address.RelativePath();
  MutexLock lock(mu_);
  if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second.region_id == region_id;
  return CopyLocked(key, region_id) != nullptr;
}

bool RamTier::HasCopy(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  return CopyLocked(address.RelativePath(), region_id) != nullptr;
}

void RamTier::Forget(const BlockAddress& address, std::optional<uint64_t> region_id) {
  const std::string key = address.RelativePath();
  MutexLock lock(mu_);
  auto at = [&](uint64_t region) { return !region_id || *region_id == region; };
  if (auto it = in_flight_.find(key); it != in_flight_.end() && at(it->second.region_id)) {
    it->second.forgotten = true;
  }
  if (auto it = copies_.find(key); it != copies_.end() && at(it->second.copy->region_id())) {
    DropLocked(it);
    stats_.forgotten++;
  }
}

void RamTier::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  for (auto& [key, in_flight] : in_flight_) in_flight.forgotten = true;
  while (!copies_.empty()) DropLocked(copies_.begin());
}

RamTierStats RamTier::Stats() const {
  MutexLock lock(mu_);
  RamTierStats s = stats_;
  // A copy held by the tier cannot be freed under mu_, so live >= held but for a deleter racing
  // this read of a copy already dropped.
  const uint64_t live = live_bytes_->load();
  s.bytes_dropped_open = live > s.bytes_held ? live - s.bytes_held : 0;
  return s;
}

}  // namespace gpucache
