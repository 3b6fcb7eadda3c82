#include "store/reservation_table.h"

namespace gpucache {
namespace {

bool InNamespace(const BlockAddress& a, std::string_view tenant, std::string_view ns) {
  return a.tenant == tenant && a.ns == ns;
}

}  // namespace

ReservationTable::Reservation& ReservationTable::Add(const BlockAddress& address, Owner owner,
                                                     uint64_t epoch, uint64_t now_ns) {
  Reservation r;
  r.info.id = next_id_++;
  r.info.address = address;
  r.info.owner = owner;
  r.info.state = BlockState::kAbsent;
  MustTransition(r.info.state, BlockState::kReserved);
  if (epoch != region_epoch_) {  // a new epoch's ids cannot meet an older one's
    region_epoch_ = epoch;
    next_region_seq_ = 0;
  }
  r.info.region_id = (epoch << 32) | ++next_region_seq_;
  r.info.epoch = epoch;
  r.info.create_time_ns = now_ns;
  r.info.modify_time_ns = now_ns;
  r.last_activity_ns = now_ns;
  by_address_[address] = r.info.id;
  fenced_since_.erase(address);  // a new fill: what a joiner or the xattr learns is its outcome
  RecordOutcome(address, FillState::kPending);
  return reservations_[r.info.id] = std::move(r);
}

ReservationTable::Reservation* ReservationTable::Find(ReservationId id) {
  auto it = reservations_.find(id);
  return it == reservations_.end() ? nullptr : &it->second;
}

std::optional<ReservationId> ReservationTable::Holder(const BlockAddress& address) const {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return std::nullopt;
  auto r = reservations_.find(it->second);
  if (r != reservations_.end() && r->second.fenced) return std::nullopt;  // a fenced seal's claim
  return it->second;
}

bool ReservationTable::AnyIn(std::string_view tenant, std::string_view ns) const {
  auto it = by_address_.lower_bound(BlockAddress{std::string(tenant), std::string(ns), ""});
  return it != by_address_.end() && InNamespace(it->first, tenant, ns);
}

std::vector<std::string> ReservationTable::PartNamesIn(std::string_view tenant,
                                                       std::string_view ns) const {
  std::vector<std::string> out;
  auto it = by_address_.lower_bound(BlockAddress{std::string(tenant), std::string(ns), ""});
  for (; it != by_address_.end() && InNamespace(it->first, tenant, ns); ++it) {
    auto r = reservations_.find(it->second);
    if (r != reservations_.end() && r->second.fenced) continue;  // a fenced seal: looked up, ESTALE
    out.push_back(it->first.block + std::string(kPartSuffix));
  }
  return out;
}

void ReservationTable::Unclaim(const Reservation& r) {
  auto it = by_address_.find(r.info.address);
  if (it != by_address_.end() && it->second == r.info.id) by_address_.erase(it);
}

void ReservationTable::End(ReservationId id, FillState outcome, BlockState to) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  Reservation& r = it->second;
  if (!r.fenced) {
    Unclaim(r);
    RecordOutcome(r.info.address, outcome);
    MustTransition(r.info.state, to);
  }
  reservations_.erase(it);
}

void ReservationTable::ForgetFencedSeal(ReservationId id) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  Unclaim(it->second);
  reservations_.erase(it);
}

std::shared_ptr<PendingPayload> ReservationTable::ForgetIfFencedIdle(ReservationId id) {
  auto it = reservations_.find(id);
  if (it == reservations_.end() || !it->second.fenced || !it->second.idle()) return nullptr;
  std::shared_ptr<PendingPayload> payload = std::move(it->second.payload);
  reservations_.erase(it);
  return payload;
}

void ReservationTable::FenceAll(uint64_t now_ns,
                                const std::function<void(const Reservation&)>& released,
                                std::vector<std::shared_ptr<PendingPayload>>& discard) {
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    Reservation& r = it->second;
    if (r.fenced) {
      ++it;
      continue;
    }
    released(r);
    // A sealing fill may be publishing its file under the block's name this moment: the
    // address stays claimed until its commit has removed that file again, or a new fill of
    // the same block could commit first and lose its file to that removal.
    if (!r.sealing) Unclaim(r);
    RecordOutcome(r.info.address, FillState::kFenced);
    fenced_since_[r.info.address] = now_ns;
    MustTransition(r.info.state, BlockState::kAbsent);
    r.fenced = true;
    if (r.idle()) {
      if (r.payload) discard.push_back(std::move(r.payload));
      it = reservations_.erase(it);
    } else {
      ++it;  // forgotten by the call that lets go of it last (ForgetIfFencedIdle)
    }
  }
}

size_t ReservationTable::ExpireIdle(uint64_t now_ns, uint64_t lease_ns,
                                    const std::function<void(const Reservation&)>& released,
                                    std::vector<std::shared_ptr<PendingPayload>>& discard) {
  size_t expired = 0;
  std::erase_if(fenced_since_, [&](const auto& f) { return now_ns >= f.second + lease_ns; });
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    Reservation& r = it->second;
    if (r.fenced && r.idle()) {  // released at the fence: only its payload is left
      if (r.payload) discard.push_back(std::move(r.payload));
      it = reservations_.erase(it);
      continue;
    }
    if (r.fenced || !r.idle() || now_ns <= r.last_activity_ns + lease_ns) {
      ++it;
      continue;
    }
    released(r);
    if (r.payload) discard.push_back(std::move(r.payload));
    Unclaim(r);
    RecordOutcome(r.info.address, FillState::kFailed);
    MustTransition(r.info.state, BlockState::kAbsent);
    it = reservations_.erase(it);
    expired++;
  }
  return expired;
}

void ReservationTable::RecordOutcome(const BlockAddress& address, FillState state) {
  auto [it, inserted] = outcomes_.insert_or_assign(address, state);
  if (!inserted) return;
  outcome_order_.push_back(address);
  if (outcome_order_.size() > kMaxOutcomes) {
    outcomes_.erase(outcome_order_.front());
    outcome_order_.pop_front();
  }
}

std::optional<FillState> ReservationTable::Outcome(const BlockAddress& address) const {
  if (fenced_since_.contains(address)) return FillState::kFenced;
  auto it = outcomes_.find(address);
  if (it == outcomes_.end()) return std::nullopt;
  return it->second;
}

bool ReservationTable::RecentlyFenced(const BlockAddress& address, uint64_t now_ns,
                                      uint64_t lease_ns) const {
  auto it = fenced_since_.find(address);
  return it != fenced_since_.end() && now_ns < it->second + lease_ns;
}

}  // namespace gpucache
