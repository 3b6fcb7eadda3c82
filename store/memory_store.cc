#include "store/memory_store.h"

#include <algorithm>
#include <cstring>

namespace gpucache {
namespace {

class Buffer final : public PendingPayload {
 public:
  Mutex mu;
  Bytes bytes GUARDED_BY(mu);
};

class Stored final : public StoredPayload {
 public:
  Stored(Bytes b, PayloadChecksums s, Bytes id)
      : bytes(std::move(b)), sums(std::move(s)), identity(std::move(id)) {}
  Bytes bytes;  // mutable only through TEST_CorruptByte
  const PayloadChecksums sums;
  const Bytes identity;  // canonical (GPCK)
};

class MemorySource final : public RawSource {
 public:
  explicit MemorySource(std::shared_ptr<Stored> s) : stored_(std::move(s)) {}
  StatusCode ReadRaw(uint64_t offset, std::span<uint8_t> out) override {
    if (offset + out.size() > stored_->bytes.size()) return StatusCode::kIoError;
    std::memcpy(out.data(), stored_->bytes.data() + offset, out.size());
    return StatusCode::kOk;
  }

 private:
  std::shared_ptr<Stored> stored_;  // keeps the bytes alive after an eviction
};

}  // namespace

MemoryStore::MemoryStore(StoreOptions options)
    : IndexedStore(std::move(options), std::make_unique<MemoryMedium>()) {}

bool MemoryMedium::Load(MediumReport& report, std::string&) {
  report.epoch = 1;
  return true;
}

StatusCode MemoryMedium::CreateNamespace(std::string_view, std::string_view, Owner) {
  return StatusCode::kOk;
}

StatusCode MemoryMedium::RemoveNamespace(std::string_view, std::string_view) {
  return StatusCode::kOk;
}

Result<std::shared_ptr<PendingPayload>> MemoryMedium::Prepare(const ReservationInfo&) {
  return std::shared_ptr<PendingPayload>(std::make_shared<Buffer>());
}

Result<size_t> MemoryMedium::Write(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) {
  auto& b = static_cast<Buffer&>(p);
  MutexLock lock(b.mu);
  if (b.bytes.size() < offset + data.size()) b.bytes.resize(offset + data.size());
  std::copy(data.begin(), data.end(), b.bytes.begin() + offset);
  return data.size();
}

StatusCode MemoryMedium::Truncate(PendingPayload& p, uint64_t size) {
  auto& b = static_cast<Buffer&>(p);
  MutexLock lock(b.mu);
  b.bytes.resize(size);
  return StatusCode::kOk;
}

Result<Medium::Sealed> MemoryMedium::Seal(PendingPayload& p, const BlockInfo& draft,
                                          std::optional<BlockLocation>&) {
  auto& b = static_cast<Buffer&>(p);
  MutexLock lock(b.mu);
  b.bytes.resize(draft.size);
  PayloadChecksums sums = ComputeChecksums(b.bytes);
  auto stored = std::make_shared<Stored>(std::move(b.bytes), sums, draft.canonical_identity);
  return Sealed{std::move(sums), std::move(stored)};
}

void MemoryMedium::Discard(PendingPayload&) {}

Result<Medium::Opened> MemoryMedium::Open(const BlockInfo&,
                                                 const std::shared_ptr<StoredPayload>& stored) {
  auto s = std::static_pointer_cast<Stored>(stored);
  return Opened{std::make_unique<MemorySource>(s), s->sums, s->identity};
}

Result<Medium::Held> MemoryMedium::ReadHeld(const BlockInfo&,
                                            const std::shared_ptr<StoredPayload>& stored) {
  held_reads_.fetch_add(1);
  auto s = std::static_pointer_cast<Stored>(stored);
  return Held{s->identity, "xxh3-128:" + s->sums.digest_hex};
}

std::shared_ptr<StoredPayload> MemoryMedium::Quarantine(
    const BlockInfo&, const std::shared_ptr<StoredPayload>& stored) {
  return stored;  // the bytes stay where they are, out of the index
}

StatusCode MemoryMedium::Drop(const BlockInfo&, const std::shared_ptr<StoredPayload>&) { return StatusCode::kOk; }

bool MemoryMedium::TEST_CorruptByte(const std::shared_ptr<StoredPayload>& payload, uint64_t offset) {
  auto stored = std::static_pointer_cast<Stored>(payload);
  if (!stored || offset >= stored->bytes.size()) return false;
  stored->bytes[offset] ^= 0x01;
  return true;
}

}  // namespace gpucache
