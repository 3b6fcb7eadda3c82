// IndexedStore: committed blocks: the index, reads, lookups, eviction and quarantine entry.
#include <xxhash.h>

#include <algorithm>

#include "store/indexed_store.h"
#include "store/verifying_reader.h"

namespace gpucache {
namespace {

std::string ChecksumText(std::string_view hex) { return "xxh3-128:" + std::string(hex); }

// The identity a medium holds for the block at `address`, if it is a valid one that names
// that address. The index keeps no digest of the identity: the address is one (a digest of
// every field, store/layout.h), so a header that names another address was replaced or damaged.
Result<CacheIdentity> IdentityNaming(std::span<const uint8_t> canonical, const BlockAddress& address) {
  Result<CacheIdentity> id = DecodePhysicalKey(canonical);
  if (id.ok() && AddressOf(id.value()) != address) return StatusCode::kInvalidArgument;
  return id;
}

}  // namespace


// --- The index ---------------------------------------------------------------------------

BlockInfo IndexedStore::AttributesOfLocked(BlockId id) const {
  const Record& r = index_.at(id);
  BlockInfo info;
  info.address = index_.AddressOf(id);
  info.size = r.size;
  info.commit_epoch = index_.CommitEpochOf(id);
  info.region_id = r.region_id;
  info.owner = index_.BlockOwner(id);
  info.commit_time_ns = r.commit_time_ns;
  info.pinned = r.pinned;
  info.state = r.state();
  return info;
}

std::optional<IndexedStore::BlockId> IndexedStore::IndexLocked(const IndexedBlock& b,
                                                               std::shared_ptr<StoredPayload> stored,
                                                               bool known_new) {
  const BlockAddress& address = b.address;
  const IndexKeys& keys = b.keys;
  const BlockIndex::Committed block{.size = b.size,
                                    .region_id = b.region_id,
                                    .commit_time_ns = b.commit_time_ns,
                                    .commit_epoch = b.commit_epoch,
                                    .pinned = b.pinned};
  // The resident block whose last chain hash is this block's parent hash, if any (looked up
  // before this one is in, so that a one-hash chain is not its own parent).
  std::optional<BlockId> parent;
  if (std::optional<uint32_t> ns = index_.namespaces().Find(address.tenant, address.ns)) {
    parent = index_.ByTail(*ns, keys.parent);
  }
  std::optional<BlockId> id = index_.Insert(address, block, keys, b.owner, std::move(stored), known_new);
  if (!id) return std::nullopt;
  admission_.Indexed(*id, parent, keys.valid_length < keys.block_capacity, PolicyKeyOf(address));
  unverified_.Remove(*id);  // a reused id: this block is checked
  return id;
}

void IndexedStore::TouchNamespaceLocked(const BlockAddress& address) {
  if (std::optional<uint32_t> ns = index_.namespaces().Find(address.tenant, address.ns)) index_.namespaces().Touch(*ns, NowNs());
}

IndexedStore::Record IndexedStore::UnindexLocked(BlockId id) {
  unverified_.Remove(id);  // evicted before checked: nothing to check
  index_.namespaces().Touch(index_.NamespaceOf(id), NowNs());
  admission_.Unindexing(id);
  return index_.Remove(id);
}

void IndexedStore::ForgetLocked(BlockId id) {
  index_.MarkEvicting(id);
  BlockState state = UnindexLocked(id).state();
  MustTransition(state, BlockState::kAbsent);
}

Departure IndexedStore::DepartLocked(BlockId id, bool quarantine) {
  index_.MarkEvicting(id);
  BlockInfo info = AttributesOfLocked(id);
  std::shared_ptr<StoredPayload> stored = index_.StoredOf(id);
  UnindexLocked(id);
  leaving_.Leaving(info.address);
  return Departure{std::move(info), std::move(stored), quarantine};
}

Departure IndexedStore::RemoveLocked(BlockId id, const char* reason) {
  int open = static_cast<int>(index_.OpenReaders(id));
  Departure d = DepartLocked(id, open > 0);
  if (d.quarantine) {
    // The bytes may still be in use through an open handle: they stay, counted, until a
    // drained attestation or a fenced reclaim.
    admission_.Quarantined(d.info.address.tenant, d.info.size);
    admission_.Counters(d.info.address.tenant).quarantined++;
    quarantine_.Add({d.info, d.stored, open, reason, epoch_.load()});
  }
  return d;
}

// Medium work for blocks that left the namespace, outside the lock.
void IndexedStore::Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify) {
  RemovalObserver observer;
  {
    MutexLock lock(mu_);
    observer = observer_;
  }
  for (Departure& d : departures) {
    if (d.quarantine) {
      auto moved = medium_->Quarantine(d.info, d.stored);
      MutexLock lock(mu_);
      quarantine_.SetStored(d.info.region_id, std::move(moved));
      leaving_.Left(d.info.address);
    } else if (!d.damage.empty()) {
      std::string kept = medium_->SetAside(d.info, d.stored);
      if (!kept.empty()) d.damage += "; " + kept;
      MustTransition(d.info.state, BlockState::kAbsent);
      MutexLock lock(mu_);
      leaving_.Left(d.info.address);
    } else {
      medium_->Drop(d.info, d.stored);
      MustTransition(d.info.state, BlockState::kAbsent);
      MutexLock lock(mu_);
      leaving_.Left(d.info.address);
    }
    if (notify && observer) observer(d.info.address, *notify, d.damage);
  }
  if (!departures.empty()) FoldJournalIfDue();  // removals are journaled too
}

StatusCode IndexedStore::MakeDeviceRoom(const PendingPayload& p, const std::string& tenant,
                                        uint64_t need) {
  std::optional<Medium::DeviceSpace> space = medium_->SpaceFor(p);  // I/O: before the lock
  std::vector<Departure> evicted;
  StatusCode s;
  {
    MutexLock lock(mu_);
    std::vector<BlockId> victims;
    s = admission_.RoomOnDevice(p, space, tenant, need, victims);
    for (BlockId v : victims) evicted.push_back(RemoveLocked(v, "evicted"));
  }
  Finish(std::move(evicted), RemovalReason::kEvicted);
  return s;
}

// --- Reading -----------------------------------------------------------------------------

Result<BlockInfo> IndexedStore::StatAttributes(const BlockAddress& address) {
  VerifyBeforeUse(address);
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  if (!id) return StatusCode::kNotFound;
  return AttributesOfLocked(*id);
}

Result<BlockInfo> IndexedStore::Stat(const BlockAddress& address) {
  VerifyBeforeUse(address);
  BlockInfo info;
  std::shared_ptr<StoredPayload> stored;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) return StatusCode::kNotFound;
    info = AttributesOfLocked(*id);
    stored = index_.StoredOf(*id);
  }
  Result<Medium::Held> held = medium_->ReadHeld(info, stored);
  if (held.ok()) {
    if (Result<CacheIdentity> id = IdentityNaming(held->identity, address); id.ok()) {
      info.identity = std::move(id.value());
      info.canonical_identity = std::move(held->identity);
      info.checksum = std::move(held->checksum);
      return info;
    }
  }
  if (!held.ok() && held.status() != StatusCode::kChecksumMismatch) return held.status();
  // The medium no longer holds what was committed there: the block is gone, as an open of it
  // would find.
  ReportCorrupt(address, info.region_id, "its header or identity");
  return StatusCode::kNotFound;
}

Result<BlockInfo> IndexedStore::Probe(const BlockAddress& address) {
  VerifyBeforeUse(address);
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  TenantCounters& c = admission_.Counters(address.tenant);
  if (!id) {
    c.misses++;
    admission_.Missed(PolicyKeyOf(address));
    return StatusCode::kNotFound;
  }
  c.hits++;  // the use itself is counted for the policy when the block is opened
  return AttributesOfLocked(*id);
}

Result<std::shared_ptr<BlockReader>> IndexedStore::Open(const BlockAddress& address) {
  return OpenReader(address, /*client=*/true);
}

Result<std::shared_ptr<BlockReader>> IndexedStore::OpenForCopy(const BlockAddress& address) {
  return OpenReader(address, /*client=*/false);
}

Result<std::shared_ptr<BlockReader>> IndexedStore::OpenReader(const BlockAddress& address, bool client) {
  VerifyBeforeUse(address);
  BlockInfo info;
  std::shared_ptr<StoredPayload> stored;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) {
      if (client) admission_.Missed(PolicyKeyOf(address));
      return StatusCode::kNotFound;
    }
    if (client) {
      index_.ReaderOpened(*id);  // the reader's destructor gives it back
      admission_.Used(*id);
    }
    info = AttributesOfLocked(*id);
    stored = index_.StoredOf(*id);
  }
  Result<Medium::Opened> opened = medium_->Open(info, stored);
  StatusCode status = opened.status();
  if (opened.ok()) {
    // The medium's identity must be the one committed: a file replaced or damaged since it was
    // indexed is caught here, before any payload byte is served.
    if (Result<CacheIdentity> id = IdentityNaming(opened->identity, address); id.ok()) {
      info.identity = std::move(id.value());
      info.canonical_identity = std::move(opened->identity);
      info.checksum = ChecksumText(opened->checksums.digest_hex);
    } else {
      status = StatusCode::kChecksumMismatch;
    }
  }
  if (status != StatusCode::kOk) {
    if (client) ReaderClosed(address, info.region_id);
    if (status != StatusCode::kChecksumMismatch) return status;
    // The block may have left between the lookup and the medium's open (invalidated, evicted:
    // its file moved or removed): then this open is a miss, as it would be a moment later.
    if (!Indexed(address, info.region_id)) return StatusCode::kNotFound;
    ReportCorrupt(address, info.region_id, "its header or identity");
    return status;
  }
  return std::shared_ptr<BlockReader>(std::make_shared<VerifyingReader>(
      *this, std::move(info), std::move(opened->source), std::move(opened->checksums), client));
}

bool IndexedStore::Indexed(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  return id && index_.at(*id).region_id == region_id;
}

void IndexedStore::ReaderClosed(const BlockAddress& address, uint64_t region_id) {
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  if (id && index_.at(*id).region_id == region_id) {
    index_.ReaderClosed(*id);
    return;
  }
  // Last close of a quarantined block does not free it: only reclaim does.
  quarantine_.ReaderClosed(region_id);
}

std::optional<LookupResult> IndexedStore::PrefixHitLocked(const CacheIdentity& want,
                                                          const BlockAddress& self) {
  std::optional<uint32_t> ns = index_.namespaces().Find(self.tenant, self.ns);
  if (!ns) return std::nullopt;
  // A candidate is a prefix when its chain is a strict prefix of the wanted one and its
  // multimodal inputs are the same: its ChainDigest equals the wanted chain's, cut to its
  // length. Digests of the wanted chain, by length, computed once each.
  std::vector<std::optional<uint64_t>> digests(want.chain.size());
  std::optional<BlockId> best;
  uint64_t parent = XXH3_64bits(want.chain[0].data(), want.chain[0].size());
  // The lambda runs under mu_ (the analysis checks it as a function of its own).
  index_.ForEachWithParent(*ns, parent, [&](BlockId id) NO_THREAD_SAFETY_ANALYSIS {
    const Record& have = index_.at(id);
    if (have.chain_length >= want.chain.size()) return;
    std::optional<uint64_t>& d = digests[have.chain_length];
    if (!d) d = ChainDigest(want, have.chain_length);
    if (have.prefix != *d) return;
    if (have.valid_length > want.valid_length) return;  // never longer than asked
    if (!best || have.chain_length > index_.at(*best).chain_length) best = id;
  });
  if (!best) return std::nullopt;
  return LookupResult{LookupResult::Kind::kPrefixHit, MissReason::kAbsent, index_.AddressOf(*best),
                      index_.at(*best).valid_length};
}

LookupResult IndexedStore::Lookup(const CacheIdentity& identity) {
  if (Validate(identity) != StatusCode::kOk) return {};
  BlockAddress address = AddressOf(identity);
  Bytes logical_key = EncodeLogicalKey(identity);
  uint64_t logical = XXH3_64bits(logical_key.data(), logical_key.size());
  VerifyBeforeUse(address);
  MutexLock lock(mu_);
  TenantCounters& c = admission_.Counters(identity.tenant);
  // The address is a digest of every field of the identity (store/layout.h): a block indexed
  // there is this identity's, as every open of it checks against the block's header.
  if (index_.Find(address)) {
    c.hits++;
    return {LookupResult::Kind::kHit, MissReason::kAbsent, address, identity.valid_length};
  }
  std::optional<LookupResult> prefix = PrefixHitLocked(identity, address);
  // A prefix not yet checked against its file (adr/0016) is checked first, then the question is
  // asked again: the check may have dropped it, or another may be the longest now. Each round
  // checks one more block, and blocks only become checked, so this ends.
  while (prefix && walking_.load(std::memory_order_acquire)) {
    std::optional<BlockId> best = index_.Find(prefix->address);
    if (!best || !unverified_.Contains(*best)) break;
    lock.Unlock();
    VerifyBeforeUse(prefix->address);
    lock.Lock();
    if (index_.Find(address)) {  // committed meanwhile
      c.hits++;
      return {LookupResult::Kind::kHit, MissReason::kAbsent, address, identity.valid_length};
    }
    prefix = PrefixHitLocked(identity, address);
  }
  if (prefix) {
    c.prefix_hits++;
    return *prefix;
  }
  c.misses++;
  admission_.Missed(PolicyKeyOf(address));
  LookupResult miss;
  if (index_.HasLogical(logical)) {
    miss.reason = MissReason::kIncompatible;
    c.misses_incompatible++;
  } else if (reservations_.Outcome(address) == FillState::kFenced) {
    miss.reason = MissReason::kFenced;
    c.misses_fenced++;
  } else if (quarantine_.HoldsAddress(address)) {
    miss.reason = MissReason::kQuarantined;
    c.misses_quarantined++;
  }
  return miss;
}

}  // namespace gpucache
