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
  Result<ReservationId> ReserveForDaemon(const BlockAddress& address, Owner owner) override;
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
  Result<ReservationId> ReserveFill(const BlockAddress& address, Owner owner, bool daemon_held);
  // Admits a write or truncate of `r` reaching `end` (AdmitBytes: max_block_bytes, in-flight
  // bytes) and counts its growth now, before the I/O: a write admitted against a count that
  // another's growth had not reached yet let both pass max_inflight_bytes.
  StatusCode CreditLocked(Reservation& r, uint64_t end) REQUIRES(mu_);
  // After a write or truncate of `r`: once none is in flight, its credit is its size again
  // (what a short or failed write was admitted for and did not write goes back).
  void SettleCreditLocked(Reservation& r) REQUIRES(mu_);
  // A write to `p` (of reservation `id`) met a full device: evicts what may go there, or
  // kNoSpace having evicted none.
  StatusCode MakeDeviceRoom(ReservationId id, const PendingPayload& p, const std::string& tenant, uint64_t need)
      EXCLUDES(mu_);
  // Where a fill of `identity` sits in its namespace's chains: the room made for it keeps its
  // resident ancestors (Admission::RoomForCommit). Two hashes and a lookup, under the lock.
  struct ChainOfFill {
    std::optional<BlockId> parent;
    std::optional<Admission::ChainLink> link;
  };
  ChainOfFill ChainLocked(const BlockAddress& address, const CacheIdentity& identity) REQUIRES(mu_);
};

}  // namespace gpucache
