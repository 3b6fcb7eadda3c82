// MemoryStore: the in-process reference implementation of the store contract: the store
// (store/indexed_store.h) over MemoryMedium, which keeps bytes in memory.
//
// Everything but where the bytes live (index, lookup rules, lifecycle, checksums verified on
// every read) is the same store logic FileMedium serves, so a contract test that passes on both
// proves the file medium adds nothing but persistence.
//
// Thread safety: as BlockStore.
#pragma once

#include <atomic>

#include "store/indexed_store.h"

namespace gpucache {

class MemoryMedium final : public Medium {
 public:
  bool Load(MediumReport& report, std::string& error) override;
  StatusCode CreateNamespace(std::string_view, std::string_view, Owner) override;
  StatusCode RemoveNamespace(std::string_view, std::string_view) override;
  Result<std::shared_ptr<PendingPayload>> Prepare(const ReservationInfo& info) override;
  Result<size_t> Write(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) override;
  StatusCode Truncate(PendingPayload& p, uint64_t size) override;
  Result<Sealed> Seal(PendingPayload& p, const BlockInfo& draft,
                      std::optional<BlockLocation>& read_failed) override;
  void Discard(PendingPayload& p) override;
  Result<Opened> Open(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  Result<Held> ReadHeld(const BlockInfo& info,
                        const std::shared_ptr<StoredPayload>& stored) override;
  std::shared_ptr<StoredPayload> Quarantine(const BlockInfo& info,
                                            const std::shared_ptr<StoredPayload>& stored) override;
  StatusCode Drop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  StatusCode PersistEpoch(uint64_t) override { return StatusCode::kOk; }
  void PersistPins(const std::vector<PinnedBlock>&) override {}
  MediumIoStats IoStats() const override { return {"memory (no backing files)", std::nullopt}; }

  // Test hook: flips one payload byte of a committed block, as a bad DIMM would.
  bool TEST_CorruptByte(const std::shared_ptr<StoredPayload>& stored, uint64_t offset);
  // Test hook: how many times ReadHeld ran (what a file medium pays a header read for).
  uint64_t TEST_HeldReads() const { return held_reads_.load(); }

 private:
  std::atomic<uint64_t> held_reads_{0};
};

// The store over a fresh MemoryMedium: nothing to load.
class MemoryStore final : public IndexedStore {
 public:
  explicit MemoryStore(StoreOptions options = {});
  bool TEST_CorruptByte(const BlockAddress& address, uint64_t offset) {
    return static_cast<MemoryMedium&>(medium()).TEST_CorruptByte(StoredAt(address), offset);
  }
  uint64_t TEST_HeldReads() { return static_cast<MemoryMedium&>(medium()).TEST_HeldReads(); }
};

}  // namespace gpucache
