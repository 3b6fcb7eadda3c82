// StoreFills: namespaces, reservations, admission and commit.
#include "store/store_fills.h"

#include <time.h>

#include <algorithm>
#include <cassert>
#include <tuple>

#include "store/block_file.h"
#include "store/failpoint.h"

namespace gpucache {
namespace {

// A fill being sealed, or whose payload the medium is still preparing (Reserve leaves the lock
// for it with the address already claimed, and another caller may find the fill by its name
// meanwhile), cannot be written, resized or committed yet.
bool NotReady(const ReservationTable::Reservation& r) { return r.sealing || !r.payload; }

}  // namespace

StatusCode StoreFills::CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) {
  if (!IsValidTenantName(tenant) || !IsValidNamespaceName(ns)) return StatusCode::kInvalidArgument;
  MutexLock lock(mu_);
  if (index_.namespaces().Find(tenant, ns)) return StatusCode::kExists;  // no wait: the usual case
  // From the check to the index, no removal of it may run (its rmdir would take the directory
  // made here), nor another create.
  namespace_claims_.Claim(tenant, ns, mu_);
  if (index_.namespaces().Find(tenant, ns)) {  // another create, while this one waited
    namespace_claims_.Release(tenant, ns);
    return StatusCode::kExists;
  }
  lock.Unlock();
  StatusCode s = medium_->CreateNamespace(tenant, ns, owner);
  lock.Lock();
  namespace_claims_.Release(tenant, ns);
  if (s != StatusCode::kOk) return s;
  index_.namespaces().Touch(index_.namespaces().Add(std::string(tenant), std::string(ns), owner), NowNs());
  return StatusCode::kOk;
}

StatusCode StoreFills::RemoveNamespace(std::string_view tenant, std::string_view ns) {
  // "Empty" is known only once the start's walk has seen every file (adr/0016): a file it has
  // not reached yet would make the directory's removal fail after the index forgot it, and the
  // walk would then create the namespace again under the file's committer.
  WaitForVerification();
  MutexLock lock(mu_);
  // Out of the index before its directories go (no fill may start there meanwhile), and
  // claimed until they are gone: a create of it waits, then makes them again.
  namespace_claims_.Claim(tenant, ns, mu_);
  std::optional<uint32_t> id = index_.namespaces().Find(tenant, ns);
  if (!id || index_.namespaces().BlocksIn(*id) != 0 || reservations_.AnyIn(tenant, ns)) {
    namespace_claims_.Release(tenant, ns);
    return id ? StatusCode::kNotEmpty : StatusCode::kNotFound;
  }
  index_.namespaces().Remove(*id);
  lock.Unlock();
  StatusCode s = medium_->RemoveNamespace(tenant, ns);
  lock.Lock();
  namespace_claims_.Release(tenant, ns);
  return s;
}

Result<ReservationId> StoreFills::Reserve(const BlockAddress& address, Owner owner) {
  return ReserveFill(address, owner, /*daemon_held=*/false);
}

Result<ReservationId> StoreFills::ReserveForDaemon(const BlockAddress& address, Owner owner) {
  return ReserveFill(address, owner, /*daemon_held=*/true);
}

Result<ReservationId> StoreFills::ReserveFill(const BlockAddress& address, Owner owner, bool daemon_held) {
  if (!IsValidTenantName(address.tenant) || !IsValidNamespaceName(address.ns) ||
      !IsValidBlockName(address.block)) {
    return StatusCode::kInvalidArgument;
  }
  ReservationInfo info;
  std::vector<Departure> evicted;  // blocks that gave up their registration for this one
  {
    MutexLock lock(mu_);
    // The epoch gave out its region ids (about 4 billion fills since the start or the last
    // fence): the store fences itself into the next, as `gpucachectl fence` would, so that no id
    // is given twice (the fills still open hear ESTALE at commit, as at any fence).
    while (reservations_.RegionIdsUsedUp(epoch_.load(), RegionIdsPerEpoch())) {
      const uint64_t used_up = epoch_.load();
      lock.Unlock();
      Result<uint64_t> next = AdvanceEpoch(used_up);
      lock.Lock();
      if (!next.ok()) return next.status();
    }
    if (!index_.namespaces().Find(address.tenant, address.ns)) return StatusCode::kNotFound;
    // A block of this address is leaving and its file is not gone yet: the new one waits for
    // the path (the wait is a file removal or rename long).
    leaving_.WaitWhileLeaving(address, mu_);
    // For one lease after a fence a fenced block's writer may still commit: it must hear
    // ESTALE, so no new fill takes the address meanwhile (adr/0006), whatever the entry point
    // (a CREATE, the commit channel, a cold refill).
    if (reservations_.RecentlyFenced(address, LeaseNowNs(), options_.reservation_lease_ns)) {
      return StatusCode::kFenced;
    }
    if (index_.Find(address) || reservations_.Claimed(address)) return StatusCode::kExists;
    // Every fill may become a block: refused here, never at the commit (store/id_table.h).
    if (index_.size() + reservations_.size() >= IdTable::kMaxIds) return StatusCode::kNoSpace;
    std::vector<BlockId> victims;
    if (StatusCode s = admission_.AdmitReservation(address.tenant, victims); s != StatusCode::kOk) {
      return s;  // nothing was evicted: a refusal changes nothing
    }
    for (BlockId v : victims) evicted.push_back(RemoveLocked(v, "evicted"));
    // The address is claimed before the lock is left.
    Reservation& added = reservations_.Add(address, owner, epoch_.load(), LeaseNowNs());
    added.daemon_held = daemon_held;
    added.info.create_time_ns = added.info.modify_time_ns = NowNs();  // what the .part shows
    info = added.info;
    TouchNamespaceLocked(address);  // a .part joins the listing
    admission_.ReservationAdmitted(address.tenant);
  }
  Finish(std::move(evicted), RemovalReason::kEvicted);
  auto payload = medium_->Prepare(info);
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(info.id);
  if (!payload.ok()) {
    if (r) EndReservationLocked(info.id, FillState::kFailed, BlockState::kAbsent);
    return payload.status();
  }
  if (!r) {  // fenced while the medium prepared it
    medium_->Discard(*payload.value());
    return StatusCode::kFenced;
  }
  r->payload = std::move(payload.value());
  return info.id;
}

StatusCode StoreFills::SetIdentity(ReservationId id, std::span<const uint8_t> canonical) {
  if (canonical.size() > kMaxIdentityBytes) return StatusCode::kInvalidArgument;
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r) return StatusCode::kNotFound;
  if (r->fenced) return StatusCode::kFenced;
  if (r->sealing) return StatusCode::kBusy;
  r->identity.assign(canonical.begin(), canonical.end());
  r->last_activity_ns = LeaseNowNs();
  GPUCACHE_FAILPOINT("identity.after_set");
  return StatusCode::kOk;
}

Result<Bytes> StoreFills::GetIdentity(ReservationId id) {
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r || r->identity.empty()) return StatusCode::kNotFound;
  return r->identity;
}

Result<size_t> StoreFills::Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) {
  std::shared_ptr<PendingPayload> payload;
  std::string tenant;
  {
    MutexLock lock(mu_);
    Reservation* r = reservations_.Find(id);
    if (!r) return StatusCode::kNotFound;
    if (r->fenced) return StatusCode::kFenced;
    if (NotReady(*r)) return StatusCode::kBusy;
    if (offset + data.size() < offset) return StatusCode::kTooLarge;
    if (StatusCode s = CreditLocked(*r, offset + data.size()); s != StatusCode::kOk) return s;
    if (r->info.state == BlockState::kReserved) MustTransition(r->info.state, BlockState::kWriting);
    r->writes_inflight++;
    payload = r->payload;
    tenant = r->info.address.tenant;
  }
  Result<size_t> n = medium_->Write(*payload, offset, data);
  if (n.status() == StatusCode::kNoSpace &&
      MakeDeviceRoom(id, *payload, tenant, data.size()) == StatusCode::kOk) {
    // The device was full, and evicting what may go there made room: once more.
    n = medium_->Write(*payload, offset, data);
  }
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r) return n;
  r->writes_inflight--;
  r->last_activity_ns = LeaseNowNs();
  if (r->fenced) {
    // The fence left the fill to this write: if the writer role ended meanwhile, nobody else
    // will forget it, and its file would stay, outside every limit.
    std::shared_ptr<PendingPayload> abandoned = reservations_.ForgetIfFencedIdle(id);
    lock.Unlock();
    if (abandoned) medium_->Discard(*abandoned);
    return StatusCode::kFenced;
  }
  if (n.ok()) {
    r->info.modify_time_ns = NowNs();
    r->info.size = std::max(r->info.size, offset + n.value());
  }
  SettleCreditLocked(*r);
  return n;
}

Result<size_t> StoreFills::Append(ReservationId id, std::span<const uint8_t> data) {
  uint64_t end;
  {
    MutexLock lock(mu_);
    Reservation* r = reservations_.Find(id);
    if (!r) return StatusCode::kNotFound;
    end = r->info.size;
  }
  return Write(id, end, data);
}

StatusCode StoreFills::Truncate(ReservationId id, uint64_t size) {
  std::shared_ptr<PendingPayload> payload;
  std::string tenant;
  uint64_t old_size;
  {
    MutexLock lock(mu_);
    Reservation* r = reservations_.Find(id);
    if (!r) return StatusCode::kNotFound;
    if (r->fenced) return StatusCode::kFenced;
    if (NotReady(*r) || r->writes_inflight) return StatusCode::kBusy;
    if (StatusCode s = CreditLocked(*r, size); s != StatusCode::kOk) return s;
    // Setting the size is writing: a payload grown by truncate alone may be committed.
    if (r->info.state == BlockState::kReserved) MustTransition(r->info.state, BlockState::kWriting);
    payload = r->payload;
    tenant = r->info.address.tenant;
    old_size = r->info.size;
    r->writes_inflight++;
  }
  // Growing declares the size: the room is found (or refused) now, whole, before any write.
  StatusCode s = size > old_size ? medium_->Allocate(*payload, size) : medium_->Truncate(*payload, size);
  if (s == StatusCode::kNoSpace && size > old_size &&
      MakeDeviceRoom(id, *payload, tenant, size - old_size) == StatusCode::kOk) {
    s = medium_->Allocate(*payload, size);
  }
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r) return s;
  r->writes_inflight--;
  if (r->fenced) {
    // As in Write: a truncate by path holds no writer role, so it may be the fill's last holder.
    std::shared_ptr<PendingPayload> abandoned = reservations_.ForgetIfFencedIdle(id);
    lock.Unlock();
    if (abandoned) medium_->Discard(*abandoned);
    return StatusCode::kFenced;
  }
  if (s == StatusCode::kOk) {
    r->info.size = size;
    r->info.modify_time_ns = NowNs();
  }
  SettleCreditLocked(*r);
  return s;
}

StatusCode StoreFills::OpenWriter(ReservationId id) {
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r) return StatusCode::kNotFound;
  if (r->fenced) return StatusCode::kFenced;
  if (r->sealing) return StatusCode::kBusy;
  r->writers++;
  return StatusCode::kOk;
}

void StoreFills::CloseWriter(ReservationId id) {
  std::shared_ptr<PendingPayload> discard;
  {
    MutexLock lock(mu_);
    Reservation* r = reservations_.Find(id);
    if (!r || r->writers == 0) return;
    r->writers--;
    r->last_activity_ns = LeaseNowNs();
    // A fenced reservation lives only until its last holder lets go.
    discard = reservations_.ForgetIfFencedIdle(id);
  }
  if (discard) medium_->Discard(*discard);
}

StatusCode StoreFills::Commit(ReservationId id) {
  std::shared_ptr<PendingPayload> payload;
  BlockInfo draft;
  std::vector<Departure> evicted;
  {
    MutexLock lock(mu_);
    Reservation* r = reservations_.Find(id);
    if (!r) return StatusCode::kNotFound;
    if (r->fenced) return StatusCode::kFenced;
    if (NotReady(*r) || r->writers > 0 || r->writes_inflight > 0) return StatusCode::kBusy;
    auto identity = DecodePhysicalKey(r->identity);
    if (!identity.ok() || AddressOf(identity.value()) != r->info.address) {
      return StatusCode::kInvalidArgument;
    }
    // The resident block this one continues: kept, with its ancestors, by the room made for it.
    const ChainOfFill chain = ChainLocked(r->info.address, identity.value());
    if (r->info.size == 0) return StatusCode::kInvalidArgument;
    if (r->info.size > admission_.MaxBlockBytes(r->info.address.tenant)) return StatusCode::kTooLarge;
    std::vector<BlockId> victims;
    StatusCode room = admission_.RoomForCommit(r->info.address.tenant, r->info.size, victims, chain.parent, chain.link);
    if (room != StatusCode::kOk) return room;
    for (BlockId v : victims) evicted.push_back(RemoveLocked(v, "evicted"));
    admission_.CommitSealing(r->info.address.tenant, r->info.size);
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
  draft.keys = IndexKeysOf(draft.identity, draft.canonical_identity);
  std::optional<BlockLocation> read_failed;
  Result<Medium::Sealed> sealed = medium_->Seal(*payload, draft, read_failed);
  if (sealed.status() == StatusCode::kNoSpace &&
      MakeDeviceRoom(id, *payload, draft.address.tenant, kBlockDataOffset) == StatusCode::kOk) {
    // The device filled up under the payload and the header (or a sync) found no room: room
    // was made from blocks that may go, as Write does; ENOSPC is for a device where evicting
    // would not help (found by tests/reliability/full_disk_test.cc).
    sealed = medium_->Seal(*payload, draft, read_failed);
  }
  // The seal's read-back of the payload met an I/O error: counted and reported as any read of
  // a block file is, so that the failing device is named (the committer hears EIO).
  if (read_failed) ReportReadError({draft.address, std::move(*read_failed), std::nullopt});
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  assert(r && r->sealing);  // nothing else removes a sealing reservation
  r->sealing = false;
  admission_.CommitEnded(draft.address.tenant, draft.size);  // indexed below, or not at all
  if (r->fenced) {
    // Fenced while sealing: fenced is not success. Nothing else holds a sealing fill (no writer
    // may open, no write start), so it goes now, and its file with it: discarded if the seal
    // failed, dropped again if it was published. Its address stayed claimed (FenceAll) and is
    // given up only once a new fill of it would wait for the removal (Leaving).
    if (!sealed.ok()) {
      reservations_.ForgetFencedSeal(id);
      lock.Unlock();
      medium_->Discard(*payload);
      return StatusCode::kFenced;
    }
    leaving_.Leaving(draft.address);
    reservations_.ForgetFencedSeal(id);
    lock.Unlock();
    medium_->Drop(draft, sealed->stored);
    lock.Lock();
    leaving_.Left(draft.address);
    return StatusCode::kFenced;
  }
  if (!sealed.ok()) return sealed.status();  // the fill stays: a commit may be tried again
  EndReservationLocked(id, FillState::kFinished, BlockState::kCommitted);
  admission_.Counters(draft.address.tenant).commits++;
  IndexLocked(draft, std::move(sealed->stored));
  const BlockAddress& committed = draft.address;
  GPUCACHE_FAILPOINT("commit.after_index");  // published and indexed, not yet acknowledged
  lock.Unlock();
  FoldJournalIfDue();  // the commit's journal record may have passed the fold size
  if (commit_observer_) commit_observer_(committed);  // set once at start-up: no copy needed
  return StatusCode::kOk;
}

std::string StoreFills::ExplainInvalidCommit(ReservationId id) {
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r) return "no such reservation";
  auto identity = DecodePhysicalKey(r->identity);
  if (!identity.ok()) return DescribeIdentityError(r->identity);
  if (BlockAddress named = AddressOf(identity.value()); named != r->info.address) {
    return "the identity names " + named.RelativePath() + ", not this path";
  }
  if (r->info.size == 0) return "empty payload (a block holds at least one byte)";
  return "";
}

StatusCode StoreFills::Abort(ReservationId id) {
  std::shared_ptr<PendingPayload> payload;
  {
    MutexLock lock(mu_);
    Reservation* r = reservations_.Find(id);
    if (!r) return StatusCode::kNotFound;
    if (r->sealing || r->writes_inflight) return StatusCode::kBusy;
    payload = std::move(r->payload);
    EndReservationLocked(id, FillState::kFailed, BlockState::kAbsent);
  }
  if (payload) medium_->Discard(*payload);
  return StatusCode::kOk;
}

Result<ReservationInfo> StoreFills::StatReservation(ReservationId id) {
  MutexLock lock(mu_);
  Reservation* r = reservations_.Find(id);
  if (!r || r->fenced) return StatusCode::kNotFound;
  return r->info;
}

std::optional<ReservationId> StoreFills::FindReservation(const BlockAddress& address) {
  MutexLock lock(mu_);
  return reservations_.Holder(address);
}

Result<ReservationId> StoreFills::FillFor(const BlockAddress& address, std::optional<uint32_t> uid) {
  MutexLock lock(mu_);
  std::optional<ReservationId> id = reservations_.Holder(address);
  Reservation* r = id ? reservations_.Find(*id) : nullptr;
  if (!r || r->fenced) return StatusCode::kNotFound;
  if (r->daemon_held) return StatusCode::kBusy;  // the daemon's own writing: not even an admin's
  if (uid && r->info.owner.uid != *uid) return StatusCode::kBusy;  // someone else's
  return *id;
}

std::optional<FillState> StoreFills::FillOutcome(const BlockAddress& address) {
  MutexLock lock(mu_);
  return reservations_.Outcome(address);
}

bool StoreFills::RecentlyFenced(const BlockAddress& address, uint64_t now_ns) {
  MutexLock lock(mu_);
  return reservations_.RecentlyFenced(address, now_ns, options_.reservation_lease_ns);
}

size_t StoreFills::ExpireReservations(uint64_t now_ns) {
  std::vector<std::shared_ptr<PendingPayload>> discard;
  size_t expired;
  {
    MutexLock lock(mu_);
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    auto release = [&](const Reservation& r) NO_THREAD_SAFETY_ANALYSIS {
      admission_.ReservationReleased(r.info.address.tenant, r.credited_bytes);
      admission_.Counters(r.info.address.tenant).expired++;
    };
    expired = reservations_.ExpireIdle(now_ns, options_.reservation_lease_ns, release, discard);
  }
  for (auto& p : discard) medium_->Discard(*p);
  return expired;
}

StatusCode StoreFills::CreditLocked(Reservation& r, uint64_t end) {
  const std::string& tenant = r.info.address.tenant;
  if (StatusCode s = admission_.AdmitBytes(tenant, r.credited_bytes, end); s != StatusCode::kOk) {
    return s;
  }
  if (end > r.credited_bytes) {
    admission_.ReservationResized(tenant, r.credited_bytes, end);
    r.credited_bytes = end;
  }
  return StatusCode::kOk;
}

void StoreFills::SettleCreditLocked(Reservation& r) {
  if (r.writes_inflight != 0 || r.credited_bytes == r.info.size) return;
  admission_.ReservationResized(r.info.address.tenant, r.credited_bytes, r.info.size);
  r.credited_bytes = r.info.size;
}

StoreFills::ChainOfFill StoreFills::ChainLocked(const BlockAddress& address, const CacheIdentity& identity) {
  ChainOfFill chain;
  if (std::optional<uint32_t> ns = index_.namespaces().Find(address.tenant, address.ns)) {
    const uint64_t parent = ChainHash(identity.chain.front()), tail = ChainHash(identity.chain.back());
    chain.parent = index_.ByTail(*ns, parent);
    chain.link = Admission::ChainLink{*ns, parent, tail};
  }
  return chain;
}

StatusCode StoreFills::MakeDeviceRoom(ReservationId id, const PendingPayload& p, const std::string& tenant,
                                        uint64_t need) {
  std::optional<Medium::DeviceSpace> space = medium_->SpaceFor(p);  // I/O: before the lock
  std::vector<Departure> evicted;
  StatusCode s;
  {
    MutexLock lock(mu_);
    std::vector<BlockId> victims;
    // A fill's own chain stays, as for a commit's room (review, 2026-12-07: on a full device,
    // the default's only eviction, a long prompt kept only its tail).
    ChainOfFill chain;
    if (Reservation* r = reservations_.Find(id)) {
      // The identity is set before the payload is written, except by a writer that skips it
      // (its commit is refused): no chain to keep then.
      if (auto identity = DecodePhysicalKey(r->identity); identity.ok()) chain = ChainLocked(r->info.address, identity.value());
    }
    s = admission_.RoomOnDevice(p, space, tenant, need, victims, chain.parent, chain.link);
    for (BlockId v : victims) evicted.push_back(RemoveLocked(v, "evicted"));
  }
  Finish(std::move(evicted), RemovalReason::kEvicted);
  return s;
}

}  // namespace gpucache
