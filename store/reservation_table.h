// ReservationTable: the fills in flight. One reservation per address (the single-flight
// point), the leases of idle ones, the outcome of recent fills (what a joiner learns), and
// epoch fencing: a fence marks every reservation fenced, and one nobody holds any more goes.
//
// It knows nothing of limits: the store releases a reservation's credits (credited_bytes,
// store/admission.h) before it asks this table to forget the reservation.
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/block_store.h"
#include "store/medium.h"

namespace gpucache {

class ReservationTable {
 public:
  struct Reservation {
    ReservationInfo info;     // info.state: RESERVED, WRITING, or ABSENT once fenced
    // What the tenant's inflight_bytes counts for it: info.size, and while writes or truncates
    // are in flight the furthest end any of them was admitted to. Growth is counted when it is
    // admitted, before the I/O, so concurrent writes each see the others' (store_fills.cc).
    uint64_t credited_bytes = 0;
    Bytes identity;
    int writers = 0;          // handles that may still write
    int writes_inflight = 0;
    bool sealing = false;     // Commit is running outside the lock
    bool fenced = false;      // an epoch bump took it: every further call is kFenced
    bool daemon_held = false;  // the daemon writes it (ReserveForDaemon): no `.part` caller may
    uint64_t last_activity_ns = 0;
    std::shared_ptr<PendingPayload> payload;

    bool idle() const { return writers == 0 && writes_inflight == 0 && !sealing; }
  };
  // At most this many fill outcomes are remembered (oldest forgotten first).
  static constexpr size_t kMaxOutcomes = 1 << 16;

  // Claims `address` (REQUIRES: not held) for a new reservation in `epoch`, state RESERVED,
  // and remembers its fill as pending.
  Reservation& Add(const BlockAddress& address, Owner owner, uint64_t epoch, uint64_t now_ns);
  Reservation* Find(ReservationId id);
  // The reservation holding `address`, if any (fenced ones hold none).
  std::optional<ReservationId> Holder(const BlockAddress& address) const;
  // Whether `address` is claimed: by a holder, or by a fill fenced while it was sealing, whose
  // file is published or about to be until its commit ends (no new fill may start there
  // before that commit has removed it).
  bool Claimed(const BlockAddress& address) const { return by_address_.contains(address); }
  // Whether a reservation holds an address in (tenant, ns), and the `.part` names there.
  bool AnyIn(std::string_view tenant, std::string_view ns) const;
  std::vector<std::string> PartNamesIn(std::string_view tenant, std::string_view ns) const;

  // Ends a reservation that is not fenced: its address is free again, its fill's outcome is
  // `outcome`, its state moves to `to` (COMMITTED or ABSENT), and it is forgotten. A fenced
  // one was released at the fence and is only forgotten.
  void End(ReservationId id, FillState outcome, BlockState to);
  // Forgets a reservation whose commit was fenced, without a new outcome, and gives up its
  // address (FenceAll kept it claimed while it was sealing).
  void ForgetFencedSeal(ReservationId id);
  // A fenced reservation nobody holds any more (idle()) is forgotten, and its payload, if it
  // has one, is handed back for the medium to discard. Every call that lets go of a fenced
  // reservation (a writer closing, a write, truncate or commit ending) ends with this one:
  // whichever of them is last, the fill's file goes with it. Nothing if it is held or not
  // fenced.
  std::shared_ptr<PendingPayload> ForgetIfFencedIdle(ReservationId id);

  // Fences every reservation not yet fenced: `released` is called for each (its credits go),
  // its fill's outcome is fenced and its state ABSENT, and its address is remembered as fenced
  // for one lease (RecentlyFenced); idle ones are forgotten, their payloads added to `discard`.
  // Busy ones stay until the last call holding them lets go (ForgetIfFencedIdle); a sealing
  // one keeps its address claimed until its commit ends (ForgetFencedSeal).
  void FenceAll(uint64_t now_ns, const std::function<void(const Reservation&)>& released,
                std::vector<std::shared_ptr<PendingPayload>>& discard);
  // Abandons idle, unfenced reservations whose last activity is over `lease_ns` before
  // `now_ns`, as End(kFailed) does; `released` is called for each first. Returns how many.
  // A fenced one found idle (its credits went at the fence) is forgotten too, its payload
  // discarded: none should be left (ForgetIfFencedIdle), and one that was would otherwise
  // hold its file and descriptor outside every limit until the daemon stops. Fenced addresses
  // older than a lease are forgotten.
  size_t ExpireIdle(uint64_t now_ns, uint64_t lease_ns,
                    const std::function<void(const Reservation&)>& released,
                    std::vector<std::shared_ptr<PendingPayload>>& discard);

  std::optional<FillState> Outcome(const BlockAddress& address) const;
  // A fill of `address` fenced less than `lease_ns` before `now_ns`: its writer may still be
  // about to commit, and must hear ESTALE, and no new fill may take the address meanwhile
  // (adr/0006). Kept apart from the bounded outcomes, so that no number of later fills makes
  // it forget a fence within the lease.
  bool RecentlyFenced(const BlockAddress& address, uint64_t now_ns, uint64_t lease_ns) const;
  size_t size() const { return reservations_.size(); }
  // Region ids are `epoch << 32 | sequence`, the sequence counted per epoch: true once epoch
  // `epoch` gave out `limit` of them, after which the store moves to the next epoch before it
  // adds another (StoreFills::Reserve), so that no id is ever given twice.
  bool RegionIdsUsedUp(uint64_t epoch, uint64_t limit) const {
    return epoch == region_epoch_ && next_region_seq_ >= limit;
  }
  // The sequence's limit: 2^32 less room for the reservations that may pass the check above
  // while the store's lock is released (a few per thread).
  static constexpr uint64_t kRegionSequenceLimit = (uint64_t{1} << 32) - (uint64_t{1} << 20);

 private:
  void Unclaim(const Reservation& r);
  void RecordOutcome(const BlockAddress& address, FillState state);

  ReservationId next_id_ = 1;
  uint64_t next_region_seq_ = 0;
  uint64_t region_epoch_ = 0;  // the epoch next_region_seq_ counts in
  std::map<ReservationId, Reservation> reservations_;
  std::map<BlockAddress, ReservationId> by_address_;
  std::map<BlockAddress, FillState> outcomes_;
  std::deque<BlockAddress> outcome_order_;  // oldest first, for the bound
  // Addresses fenced, with the fence's time: as many as reservations were open at a fence,
  // each forgotten one lease later (ExpireIdle) or when a new fill takes the address.
  std::map<BlockAddress, uint64_t> fenced_since_;
};

}  // namespace gpucache
