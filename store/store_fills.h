// StoreFills: the store's writing role (BlockFills, store/block_store.h): namespaces, the commit
// protocol (Reserve -> SetIdentity -> Write... -> Commit, or Abort), and what a writer may ask
// about its fill. A layer of IndexedStore over StoreCore (store/store_core.h).
#pragma once

#include "store/store_core.h"

namespace gpucache {

class StoreFills : public StoreCore, public virtual BlockFills {
 public:
  StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) override;
  StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) override;

  Result<ReservationId> Reserve(const BlockAddress& address, Owner owner) override;
  StatusCode SetIdentity(ReservationId id, std::span<const uint8_t> canonical) override;
  Result<Bytes> GetIdentity(ReservationId id) override;
  Result<size_t> Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) override;
  Result<size_t> Append(ReservationId id, std::span<const uint8_t> data) override;
  StatusCode Truncate(ReservationId id, uint64_t size) override;
  StatusCode OpenWriter(ReservationId id) override;
  void CloseWriter(ReservationId id) override;
  StatusCode Commit(ReservationId id) override;
  std::string ExplainInvalidCommit(ReservationId id) override;
  StatusCode Abort(ReservationId id) override;
  Result<ReservationInfo> StatReservation(ReservationId id) override;
  std::optional<ReservationId> FindReservation(const BlockAddress& address) override;
  Result<ReservationId> FillFor(const BlockAddress& address, std::optional<uint32_t> uid) override;

  std::optional<FillState> FillOutcome(const BlockAddress& address) override;
  bool RecentlyFenced(const BlockAddress& address, uint64_t now_ns) override;
  size_t ExpireReservations(uint64_t now_ns) override;

 protected:
  using StoreCore::StoreCore;

 private:
  // A write to `p` met a full device: evicts what may go there, or kNoSpace having evicted none.
  StatusCode MakeDeviceRoom(const PendingPayload& p, const std::string& tenant, uint64_t need)
      EXCLUDES(mu_);
};

}  // namespace gpucache
