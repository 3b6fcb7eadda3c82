#include "store/checksum.h"

#include <algorithm>

#include "store/identity.h"

namespace gpucache {

uint32_t ChunkSizeFor(uint64_t payload_size) {
  uint64_t size = kDefaultChunkSize;
  while ((payload_size + size - 1) / size > kMaxChunkCount) size *= 2;
  return static_cast<uint32_t>(size);
}

uint64_t ChunkChecksum(std::span<const uint8_t> chunk, uint64_t chunk_index) {
  return XXH3_64bits_withSeed(chunk.data(), chunk.size(), chunk_index);
}

PayloadHasher::PayloadHasher(uint32_t chunk_size)
    : chunk_size_(chunk_size), whole_(XXH3_createState()), chunk_(XXH3_createState()) {
  out_.chunk_size = chunk_size;
  XXH3_128bits_reset(whole_);
  XXH3_64bits_reset_withSeed(chunk_, 0);
}

PayloadHasher::~PayloadHasher() {
  XXH3_freeState(whole_);
  XXH3_freeState(chunk_);
}

void PayloadHasher::Update(std::span<const uint8_t> data) {
  XXH3_128bits_update(whole_, data.data(), data.size());
  while (!data.empty()) {
    size_t take = std::min<uint64_t>(data.size(), chunk_size_ - in_chunk_);
    XXH3_64bits_update(chunk_, data.data(), take);
    in_chunk_ += take;
    data = data.subspan(take);
    if (in_chunk_ == chunk_size_) CloseChunk();
  }
}

void PayloadHasher::CloseChunk() {
  out_.chunks.push_back(XXH3_64bits_digest(chunk_));
  XXH3_64bits_reset_withSeed(chunk_, out_.chunks.size());
  in_chunk_ = 0;
}

PayloadChecksums PayloadHasher::Finish() {
  if (in_chunk_ > 0) CloseChunk();
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(whole_));
  out_.digest_hex = HexEncode({canon.digest, sizeof canon.digest});
  return std::move(out_);
}

PayloadChecksums ComputeChecksums(std::span<const uint8_t> payload) {
  PayloadHasher h(ChunkSizeFor(payload.size()));
  h.Update(payload);
  return h.Finish();
}

ArrivalHasher::ArrivalHasher() : hasher_(std::make_unique<PayloadHasher>(kDefaultChunkSize)) {}
ArrivalHasher::~ArrivalHasher() = default;

uint64_t ArrivalHasher::Begin() {
  MutexLock lock(mu_);
  uint64_t ticket = ++started_;
  // Everything still running, and this one, overlap each other.
  if (active_ > 0) overlapped_ = ticket;
  active_++;
  return ticket;
}

bool ArrivalHasher::FinishLocked(uint64_t ticket) {
  active_--;
  // Started after this one and before its end: marks `ticket` (and every earlier one) too.
  if (started_ != ticket) overlapped_ = std::max(overlapped_, ticket);
  return ticket > overlapped_;
}

void ArrivalHasher::RestartLocked() {
  hasher_ = std::make_unique<PayloadHasher>(kDefaultChunkSize);
  hashed_ = 0;
}

void ArrivalHasher::EndWrite(uint64_t ticket, uint64_t offset, std::span<const uint8_t> data,
                             bool landed) {
  MutexLock lock(mu_);
  bool alone = FinishLocked(ticket);
  if (data.empty()) return;
  if (offset < hashed_) RestartLocked();  // the hashed prefix may have changed under it
  if (alone && landed && offset == hashed_) {
    hasher_->Update(data);
    hashed_ += data.size();
  }
}

void ArrivalHasher::EndResize(uint64_t ticket, uint64_t size) {
  MutexLock lock(mu_);
  FinishLocked(ticket);
  if (size < hashed_) RestartLocked();
}

std::unique_ptr<PayloadHasher> ArrivalHasher::Take(uint32_t chunk_size, uint64_t* hashed) {
  MutexLock lock(mu_);
  std::unique_ptr<PayloadHasher> out;
  if (chunk_size == kDefaultChunkSize && active_ == 0) {
    out = std::move(hasher_);
    *hashed = hashed_;
  } else {
    out = std::make_unique<PayloadHasher>(chunk_size);
    *hashed = 0;
  }
  RestartLocked();
  return out;
}

uint64_t ArrivalHasher::hashed() const {
  MutexLock lock(mu_);
  return hashed_;
}

}  // namespace gpucache
