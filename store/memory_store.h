// MemoryStore: the in-process reference implementation of the store contract.
//
// Bytes live in memory; everything else (index, lookup rules, lifecycle, checksums verified on
// every read) is the same IndexedStore logic FileStore uses, so a contract test that passes on
// both proves the file medium adds nothing but persistence.
//
// Thread safety: as BlockStore.
#pragma once

#include "store/indexed_store.h"

namespace gpucache {

class MemoryStore final : public IndexedStore {
 public:
  explicit MemoryStore(StoreOptions options = {});

  // Test hook: flips one payload byte of a committed block, as a bad DIMM would.
  bool TEST_CorruptByte(const BlockAddress& address, uint64_t offset);

 protected:
  StatusCode DoCreateNamespace(std::string_view, std::string_view, Owner) override;
  StatusCode DoRemoveNamespace(std::string_view, std::string_view) override;
  Result<std::shared_ptr<PendingPayload>> DoReserve(const ReservationInfo& info) override;
  Result<size_t> DoWrite(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) override;
  StatusCode DoTruncate(PendingPayload& p, uint64_t size) override;
  Result<Sealed> DoSeal(PendingPayload& p, const BlockInfo& draft) override;
  void DoDiscard(PendingPayload& p) override;
  Result<Opened> DoOpen(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  Result<Bytes> DoReadIdentity(const BlockInfo& info,
                               const std::shared_ptr<StoredPayload>& stored) override;
  std::shared_ptr<StoredPayload> DoQuarantine(const BlockInfo& info,
                                              const std::shared_ptr<StoredPayload>& stored) override;
  void DoDrop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) override;
  StatusCode DoPersistEpoch(uint64_t) override { return StatusCode::kOk; }
  void DoPersistPins(const std::vector<BlockAddress>&) override {}
};

}  // namespace gpucache
