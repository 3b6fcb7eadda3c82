// IndexedStore: namespaces, reservations, admission and commit.
#include "store/indexed_store.h"

#include <time.h>

#include <algorithm>
#include <cassert>
#include <tuple>

#include "store/block_file.h"
#include "store/failpoint.h"

namespace gpucache {
namespace {

constexpr size_t kMaxOutcomes = 1 << 16;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void Transition(BlockState& state, BlockState to) {
  assert(CanTransition(state, to));
  state = to;
}

uint64_t MinNonZero(uint64_t a, uint64_t b) { return a == 0 ? b : (b == 0 ? a : std::min(a, b)); }

}  // namespace

IndexedStore::IndexedStore(StoreOptions options, std::unique_ptr<Medium> medium)
    : options_(std::move(options)),
      medium_(std::move(medium)),
      policy_(MakePolicy(options_.eviction_policy)) {
  if (!policy_) policy_ = MakePolicy(kDefaultPolicy);
  medium_->Attach(*this);
}

IndexedStore::~IndexedStore() { medium_->Close(); }

bool IndexedStore::Load(MediumReport& report, std::string& error) {
  return medium_->Load(report, error);
}

// --- Namespaces -------------------------------------------------------------------------

StatusCode IndexedStore::CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) {
  if (!IsValidTenantName(tenant) || !IsValidNamespaceName(ns)) return StatusCode::kInvalidArgument;
  {
    std::lock_guard lock(mu_);
    if (index_.FindNamespace(tenant, ns)) return StatusCode::kExists;
  }
  if (StatusCode s = medium_->CreateNamespace(tenant, ns, owner); s != StatusCode::kOk) return s;
  std::lock_guard lock(mu_);
  if (index_.FindNamespace(tenant, ns)) return StatusCode::kExists;
  index_.AddNamespace(std::string(tenant), std::string(ns), owner);
  return StatusCode::kOk;
}

StatusCode IndexedStore::RemoveNamespace(std::string_view tenant, std::string_view ns) {
  std::unique_lock lock(mu_);
  std::optional<uint32_t> id = index_.FindNamespace(tenant, ns);
  if (!id) return StatusCode::kNotFound;
  BlockAddress lo{std::string(tenant), std::string(ns), ""};
  auto in_ns = [&](const BlockAddress& a) { return a.tenant == lo.tenant && a.ns == lo.ns; };
  auto r = reserved_.lower_bound(lo);
  if (index_.BlocksIn(*id) != 0 || (r != reserved_.end() && in_ns(r->first))) {
    return StatusCode::kNotEmpty;
  }
  index_.RemoveNamespace(*id);
  lock.unlock();
  return medium_->RemoveNamespace(tenant, ns);
}

Result<Owner> IndexedStore::StatNamespace(std::string_view tenant, std::string_view ns) {
  std::lock_guard lock(mu_);
  std::optional<uint32_t> id = index_.FindNamespace(tenant, ns);
  if (!id) return StatusCode::kNotFound;
  return index_.OwnerOf(*id);
}

std::vector<std::string> IndexedStore::ListNamespaces(std::string_view tenant) {
  std::lock_guard lock(mu_);
  return index_.NamespacesOf(tenant);
}

std::vector<std::string> IndexedStore::ListEntries(std::string_view tenant, std::string_view ns) {
  std::vector<BlockDigest> names;
  std::vector<std::string> out;
  {
    std::lock_guard lock(mu_);
    BlockAddress lo{std::string(tenant), std::string(ns), ""};
    auto in_ns = [&](const BlockAddress& a) { return a.tenant == lo.tenant && a.ns == lo.ns; };
    if (std::optional<uint32_t> id = index_.FindNamespace(tenant, ns)) {
      names.reserve(index_.BlocksIn(*id));
      for (BlockId b : index_.BlockIds(*id)) names.push_back(index_.at(b).name);
    }
    for (auto it = reserved_.lower_bound(lo); it != reserved_.end() && in_ns(it->first); ++it) {
      out.push_back(it->first.block + std::string(kPartSuffix));
    }
  }
  // Blocks first, in name order (binary order is name order), then reservations.
  std::sort(names.begin(), names.end());
  std::vector<std::string> listed;
  listed.reserve(names.size() + out.size());
  for (const BlockDigest& n : names) listed.push_back(FormatBlockName(n));
  for (std::string& p : out) listed.push_back(std::move(p));
  return listed;
}

// --- Admission ---------------------------------------------------------------------------

uint64_t IndexedStore::MaxBlockBytes(const std::string& tenant) const {
  return MinNonZero(options_.limits.global.max_block_bytes,
                    options_.limits.Tenant(tenant).max_block_bytes);
}

StatusCode IndexedStore::AdmitReservationLocked(const std::string& tenant,
                                                std::vector<Departure>& evicted) {
  if (draining_) return StatusCode::kDraining;
  const Limits& g = options_.limits.global;
  const Limits& t = options_.limits.Tenant(tenant);
  Usage global = GlobalUsageLocked();
  auto it = counters_.find(tenant);
  Usage mine = it == counters_.end() ? Usage{} : it->second.usage;
  if (!Within(global.reservations + 1, g.max_inflight_requests) ||
      !Within(mine.reservations + 1, t.max_inflight_requests)) {
    return StatusCode::kExhausted;
  }
  // Registrations are reclaimable like bytes: a committed block may give up its own, so that
  // one tenant holding them all cannot refuse everyone else forever (issue 13, defect 8).
  return MakeRegistrationRoomLocked(tenant, evicted);
}

StatusCode IndexedStore::AdmitBytesLocked(const Reservation& r, uint64_t new_size) const {
  const std::string& tenant = r.info.address.tenant;
  if (new_size > MaxBlockBytes(tenant)) return StatusCode::kTooLarge;
  if (new_size <= r.info.size) return StatusCode::kOk;
  uint64_t growth = new_size - r.info.size;
  auto it = counters_.find(tenant);
  uint64_t mine = it == counters_.end() ? 0 : it->second.usage.inflight_bytes;
  if (!Within(GlobalUsageLocked().inflight_bytes + growth, options_.limits.global.max_inflight_bytes) ||
      !Within(mine + growth, options_.limits.Tenant(tenant).max_inflight_bytes)) {
    return StatusCode::kExhausted;
  }
  return StatusCode::kOk;
}

// --- Reservations -----------------------------------------------------------------------

IndexedStore::Reservation* IndexedStore::FindLocked(ReservationId id) {
  auto it = reservations_.find(id);
  return it == reservations_.end() ? nullptr : &it->second;
}

void IndexedStore::RecordOutcomeLocked(const BlockAddress& address, FillState state) {
  auto [it, inserted] = outcomes_.insert_or_assign(address, Outcome{state, NowNs()});
  if (!inserted) return;
  outcome_order_.push_back(address);
  if (outcome_order_.size() > kMaxOutcomes) {
    outcomes_.erase(outcome_order_.front());
    outcome_order_.pop_front();
  }
}

Result<ReservationId> IndexedStore::Reserve(const BlockAddress& address, Owner owner) {
  if (!IsValidTenantName(address.tenant) || !IsValidNamespaceName(address.ns) ||
      !IsValidBlockName(address.block)) {
    return StatusCode::kInvalidArgument;
  }
  ReservationInfo info;
  std::vector<Departure> evicted;  // blocks that gave up their registration for this one
  {
    std::lock_guard lock(mu_);
    if (!index_.FindNamespace(address.tenant, address.ns)) return StatusCode::kNotFound;
    if (index_.Find(address) || reserved_.count(address)) return StatusCode::kExists;
    if (StatusCode s = AdmitReservationLocked(address.tenant, evicted); s != StatusCode::kOk) {
      return s;  // nothing was evicted: a refusal changes nothing
    }
    info.id = next_reservation_++;
    info.address = address;
    info.owner = owner;
    info.region_id = (epoch_.load() << 32) | ++next_region_seq_;
    info.epoch = epoch_.load();
    info.create_time_ns = NowNs();
    reserved_[address] = info.id;  // claim the address before leaving the lock
    Reservation r;
    r.info = info;
    r.last_activity_ns = info.create_time_ns;
    reservations_[info.id] = std::move(r);
    CountersLocked(address.tenant).usage.reservations++;
    RecordOutcomeLocked(address, FillState::kPending);
  }
  Finish(std::move(evicted), RemovalReason::kEvicted);
  auto payload = medium_->Prepare(info);
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(info.id);
  if (!payload.ok()) {
    if (r) ReleaseReservationLocked(info.id, FillState::kFailed);
    return payload.status();
  }
  if (!r) {  // fenced while the medium prepared it
    medium_->Discard(*payload.value());
    return StatusCode::kFenced;
  }
  r->payload = std::move(payload.value());
  return info.id;
}

void IndexedStore::ReleaseCreditsLocked(Reservation& r) {
  Usage& u = CountersLocked(r.info.address.tenant).usage;
  u.reservations--;
  u.inflight_bytes -= r.info.size;
  auto it = reserved_.find(r.info.address);
  if (it != reserved_.end() && it->second == r.info.id) reserved_.erase(it);
}

void IndexedStore::ReleaseReservationLocked(ReservationId id, FillState outcome) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  if (!it->second.fenced) {
    ReleaseCreditsLocked(it->second);
    RecordOutcomeLocked(it->second.info.address, outcome);
  }
  reservations_.erase(it);
}

StatusCode IndexedStore::SetIdentity(ReservationId id, std::span<const uint8_t> canonical) {
  if (canonical.size() > kMaxIdentityBytes) return StatusCode::kInvalidArgument;
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return StatusCode::kNotFound;
  if (r->fenced) return StatusCode::kFenced;
  if (r->sealing) return StatusCode::kBusy;
  r->identity.assign(canonical.begin(), canonical.end());
  r->last_activity_ns = NowNs();
  GPUCACHE_FAILPOINT("identity.after_set");
  return StatusCode::kOk;
}

Result<Bytes> IndexedStore::GetIdentity(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r || r->identity.empty()) return StatusCode::kNotFound;
  return r->identity;
}

Result<size_t> IndexedStore::Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) {
  std::shared_ptr<PendingPayload> payload;
  std::string tenant;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->fenced) return StatusCode::kFenced;
    if (r->sealing) return StatusCode::kBusy;
    if (offset + data.size() < offset) return StatusCode::kTooLarge;
    if (StatusCode s = AdmitBytesLocked(*r, offset + data.size()); s != StatusCode::kOk) return s;
    if (r->info.state == BlockState::kReserved) Transition(r->info.state, BlockState::kWriting);
    r->writes_inflight++;
    payload = r->payload;
    tenant = r->info.address.tenant;
  }
  Result<size_t> n = medium_->Write(*payload, offset, data);
  if (n.status() == StatusCode::kNoSpace &&
      MakeDeviceRoom(*payload, tenant, data.size()) == StatusCode::kOk) {
    // The device was full, and evicting what may go there made room: once more.
    n = medium_->Write(*payload, offset, data);
  }
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return n;
  r->writes_inflight--;
  r->last_activity_ns = NowNs();
  if (r->fenced) return StatusCode::kFenced;
  if (n.ok() && offset + n.value() > r->info.size) {
    uint64_t end = offset + n.value();
    CountersLocked(r->info.address.tenant).usage.inflight_bytes += end - r->info.size;
    r->info.size = end;
  }
  return n;
}

Result<size_t> IndexedStore::Append(ReservationId id, std::span<const uint8_t> data) {
  uint64_t end;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    end = r->info.size;
  }
  return Write(id, end, data);
}

StatusCode IndexedStore::Truncate(ReservationId id, uint64_t size) {
  std::shared_ptr<PendingPayload> payload;
  std::string tenant;
  uint64_t old_size;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->fenced) return StatusCode::kFenced;
    if (r->sealing || r->writes_inflight) return StatusCode::kBusy;
    if (StatusCode s = AdmitBytesLocked(*r, size); s != StatusCode::kOk) return s;
    payload = r->payload;
    tenant = r->info.address.tenant;
    old_size = r->info.size;
    r->writes_inflight++;
  }
  // Growing declares the size: the room is found (or refused) now, whole, before any write.
  StatusCode s = size > old_size ? medium_->Allocate(*payload, size) : medium_->Truncate(*payload, size);
  if (s == StatusCode::kNoSpace && size > old_size &&
      MakeDeviceRoom(*payload, tenant, size - old_size) == StatusCode::kOk) {
    s = medium_->Allocate(*payload, size);
  }
  std::lock_guard lock(mu_);
  if (Reservation* r = FindLocked(id)) {
    r->writes_inflight--;
    if (s == StatusCode::kOk && !r->fenced) {
      Usage& u = CountersLocked(r->info.address.tenant).usage;
      u.inflight_bytes = u.inflight_bytes - r->info.size + size;
      r->info.size = size;
    }
  }
  return s;
}

StatusCode IndexedStore::OpenWriter(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return StatusCode::kNotFound;
  if (r->fenced) return StatusCode::kFenced;
  if (r->sealing) return StatusCode::kBusy;
  r->writers++;
  return StatusCode::kOk;
}

void IndexedStore::CloseWriter(ReservationId id) {
  std::shared_ptr<PendingPayload> discard;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r || r->writers == 0) return;
    r->writers--;
    r->last_activity_ns = NowNs();
    // A fenced reservation lives only until its last writer lets go.
    if (r->fenced && r->writers == 0 && r->writes_inflight == 0 && !r->sealing) {
      discard = std::move(r->payload);
      reservations_.erase(id);
    }
  }
  if (discard) medium_->Discard(*discard);
}

StatusCode IndexedStore::Commit(ReservationId id) {
  std::shared_ptr<PendingPayload> payload;
  BlockInfo draft;
  std::vector<Departure> evicted;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->fenced) return StatusCode::kFenced;
    if (r->sealing || r->writers > 0 || r->writes_inflight > 0) return StatusCode::kBusy;
    auto identity = DecodePhysicalKey(r->identity);
    if (!identity.ok() || AddressOf(identity.value()) != r->info.address) {
      return StatusCode::kInvalidArgument;
    }
    if (r->info.size == 0) return StatusCode::kInvalidArgument;
    if (r->info.size > MaxBlockBytes(r->info.address.tenant)) return StatusCode::kTooLarge;
    StatusCode room = MakeRoomForCommitLocked(r->info.address.tenant, r->info.size, evicted);
    if (room != StatusCode::kOk) return room;
    r->sealing = true;
    payload = r->payload;
    draft.address = r->info.address;
    draft.identity = std::move(identity.value());
    draft.canonical_identity = r->identity;
    draft.size = r->info.size;
    draft.commit_epoch = epoch_.load();
    draft.region_id = r->info.region_id;
    draft.owner = r->info.owner;
    draft.commit_time_ns = NowNs();
  }
  Finish(std::move(evicted), RemovalReason::kEvicted);
  const IndexKeys keys = IndexKeysOf(draft.identity, draft.canonical_identity);
  Result<Medium::Sealed> sealed = medium_->Seal(*payload, draft);
  if (sealed.status() == StatusCode::kNoSpace &&
      MakeDeviceRoom(*payload, draft.address.tenant, kBlockDataOffset) == StatusCode::kOk) {
    // The device filled up under the payload and the header (or a sync) found no room: room
    // was made from blocks that may go, as Write does; ENOSPC is for a device where evicting
    // would not help (found by tests/reliability/full_disk_test.cc).
    sealed = medium_->Seal(*payload, draft);
  }
  std::unique_lock lock(mu_);
  Reservation* r = FindLocked(id);
  assert(r && r->sealing);  // nothing else removes a sealing reservation
  r->sealing = false;
  if (!sealed.ok()) return sealed.status();
  if (r->fenced) {
    // Fenced while sealing: fenced is not success, so the published file goes again.
    reservations_.erase(id);
    lock.unlock();
    medium_->Drop(draft, sealed->stored);
    return StatusCode::kFenced;
  }
  Transition(r->info.state, BlockState::kCommitted);
  ReleaseReservationLocked(id, FillState::kFinished);
  CountersLocked(draft.address.tenant).commits++;
  Record record;
  record.size = draft.size;
  record.commit_epoch = draft.commit_epoch;
  record.region_id = draft.region_id;
  record.commit_time_ns = draft.commit_time_ns;
  record.owner = draft.owner;
  record.keys = keys;
  record.checksum = ParseBlockName(sealed->checksums.digest_hex).value_or(BlockDigest{});
  record.stored = std::move(sealed->stored);
  BlockAddress committed = draft.address;
  IndexLocked(committed, std::move(record));
  GPUCACHE_FAILPOINT("commit.after_index");  // published and indexed, not yet acknowledged
  lock.unlock();
  if (commit_observer_) commit_observer_(committed);  // set once at start-up: no copy needed
  return StatusCode::kOk;
}

std::string IndexedStore::ExplainInvalidCommit(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return "no such reservation";
  auto identity = DecodePhysicalKey(r->identity);
  if (!identity.ok()) return DescribeIdentityError(r->identity);
  if (BlockAddress named = AddressOf(identity.value()); named != r->info.address) {
    return "the identity names " + named.RelativePath() + ", not this path";
  }
  if (r->info.size == 0) return "empty payload (a block holds at least one byte)";
  return "";
}

StatusCode IndexedStore::Abort(ReservationId id) {
  std::shared_ptr<PendingPayload> payload;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->sealing || r->writes_inflight) return StatusCode::kBusy;
    Transition(r->info.state, BlockState::kAbsent);
    payload = std::move(r->payload);
    ReleaseReservationLocked(id, FillState::kFailed);
  }
  if (payload) medium_->Discard(*payload);
  return StatusCode::kOk;
}

Result<ReservationInfo> IndexedStore::StatReservation(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r || r->fenced) return StatusCode::kNotFound;
  return r->info;
}

std::optional<ReservationId> IndexedStore::FindReservation(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = reserved_.find(address);
  if (it == reserved_.end()) return std::nullopt;
  return it->second;
}

}  // namespace gpucache
