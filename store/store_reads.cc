// StoreReads: namespaces and committed blocks: listings, stat, open, lookup.
#include "store/store_reads.h"

#include "store/fast_hash.h"

#include <algorithm>

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

// Listings pass over every record (no list per namespace is kept: docs/performance.md, "Daemon
// memory"), a slice per hold of the lock, so that a tenant listing a large store does not stall
// every other tenant's opens and commits for the whole pass (about 0.5 ms per 100,000 records:
// 50 ms at ten million; a slice is under 0.1 ms).
constexpr BlockIndex::Id kListSlice = 16384;

}  // namespace

Result<NamespaceInfo> StoreReads::StatNamespace(std::string_view tenant, std::string_view ns) {
  MutexLock lock(mu_);
  std::optional<uint32_t> id = index_.namespaces().Find(tenant, ns);
  if (!id) return StatusCode::kNotFound;
  return NamespaceInfo{index_.namespaces().OwnerOf(*id), index_.namespaces().ChangedAt(*id)};
}

std::vector<std::string> StoreReads::ListNamespaces(std::string_view tenant) {
  MutexLock lock(mu_);
  return index_.namespaces().NamesOf(tenant);
}

std::vector<std::string> StoreReads::ListEntries(std::string_view tenant, std::string_view ns) {
  // A listing names every block: it waits for the start's background check (adr/0016), so that
  // it never names a block whose file is gone, nor leaves out one found on disk. (Once the
  // walk is over this is one atomic load.)
  WaitForVerification();
  std::vector<BlockDigest> names;
  std::vector<std::string> parts;
  for (std::optional<BlockId> from = 0; from;) {
    if (*from != 0 && options_.between_list_slices) options_.between_list_slices();
    MutexLock lock(mu_);
    // Looked up again each slice: the namespace may have gone (then nothing more is named).
    std::optional<uint32_t> id = index_.namespaces().Find(tenant, ns);
    if (!id) break;
    if (*from == 0) {
      names.reserve(index_.namespaces().BlocksIn(*id));
      parts = reservations_.PartNamesIn(tenant, ns);
    }
    // The lambda runs under mu_ (the analysis checks it as a function of its own).
    from = index_.ForEachFrom(*from, kListSlice, [&](BlockId b) NO_THREAD_SAFETY_ANALYSIS {
      if (index_.NamespaceOf(b) == *id) names.push_back(index_.at(b).name);
    });
  }
  // Blocks first, in name order (binary order is name order), then reservations. A block that
  // left and was committed again during the pass can be met twice (at its old id and its new).
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::string> listed;
  listed.reserve(names.size() + parts.size());
  for (const BlockDigest& n : names) listed.push_back(FormatBlockName(n));
  for (std::string& p : parts) listed.push_back(std::move(p));
  return listed;
}

void StoreReads::VisitBlocks(std::string_view tenant,
                               const std::function<bool(const BlockAddress&)>& visit) {
  WaitForVerification();  // as ListEntries
  std::vector<BlockAddress> slice;
  for (std::optional<BlockId> from = 0; from;) {
    slice.clear();
    {
      MutexLock lock(mu_);
      from = index_.ForEachFrom(*from, kListSlice, [&](BlockId b) NO_THREAD_SAFETY_ANALYSIS {
        if (index_.namespaces().TenantOf(index_.NamespaceOf(b)) == tenant) {
          slice.push_back(index_.AddressOf(b));
        }
      });
    }
    for (const BlockAddress& a : slice) {
      if (!visit(a)) return;
    }
  }
}

Result<BlockInfo> StoreReads::StatAttributes(const BlockAddress& address) {
  VerifyBeforeUse(address);
  MutexLock lock(mu_);
  std::optional<BlockId> id = index_.Find(address);
  if (!id) return StatusCode::kNotFound;
  BlockInfo info = AttributesOfLocked(*id);
  info.open_handles = index_.OpenReaders(*id);  // here only: opens and probes never need it
  return info;
}

Result<BlockInfo> StoreReads::Stat(const BlockAddress& address) {
  VerifyBeforeUse(address);
  BlockInfo info;
  std::shared_ptr<StoredPayload> stored;
  {
    MutexLock lock(mu_);
    std::optional<BlockId> id = index_.Find(address);
    if (!id) return StatusCode::kNotFound;
    info = AttributesOfLocked(*id);
    info.open_handles = index_.OpenReaders(*id);
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
  if (!held.ok() && held.status() == StatusCode::kNotFound) {
    ReportVanished(address, info.region_id, medium_->LocationOf(address, stored.get()).file);
    return StatusCode::kNotFound;
  }
  if (!held.ok() && held.status() != StatusCode::kChecksumMismatch) {
    if (held.status() == StatusCode::kIoError) ReportOpenError(address, stored.get());
    return held.status();
  }
  // The medium no longer holds what was committed there: the block is gone, as an open of it
  // would find.
  ReportCorrupt(address, info.region_id, "its header or identity");
  return StatusCode::kNotFound;
}

Result<BlockInfo> StoreReads::Probe(const BlockAddress& address) {
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

// The block file could not be opened or its header read (an I/O error, not a header that reads
// and does not check out): a failing device as much as a payload read that fails. The block
// stays, as it does then.
void StoreReads::ReportOpenError(const BlockAddress& address, const StoredPayload* stored) {
  ReportReadError({address, medium_->LocationOf(address, stored), std::nullopt});
}

Result<std::shared_ptr<BlockReader>> StoreReads::Open(const BlockAddress& address) {
  return OpenReader(address, /*client=*/true);
}

Result<std::shared_ptr<BlockReader>> StoreReads::OpenForCopy(const BlockAddress& address) {
  return OpenReader(address, /*client=*/false);
}

Result<std::shared_ptr<BlockReader>> StoreReads::OpenReader(const BlockAddress& address, bool client) {
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
      // Each open reader holds a descriptor: one tenant's opens are bounded, so that they
      // cannot take the daemon's descriptor table from every other tenant.
      if (StatusCode s = admission_.AdmitOpen(address.tenant); s != StatusCode::kOk) return s;
      index_.ReaderOpened(*id);  // the reader's destructor gives both back
      admission_.ReaderOpened(address.tenant);
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
    if (status == StatusCode::kIoError) ReportOpenError(address, stored.get());
    // No file: left between the lookup and the open (evicted, invalidated), or removed from
    // under the index, which ReportVanished tells apart. A miss either way.
    if (status == StatusCode::kNotFound) {
      ReportVanished(address, info.region_id, medium_->LocationOf(address, stored.get()).file);
      return status;
    }
    if (status != StatusCode::kChecksumMismatch) return status;
    // The block may have left between the lookup and the medium's open (invalidated, evicted:
    // its file moved or removed): then this open is a miss, as it would be a moment later.
    if (!Indexed(address, info.region_id)) return StatusCode::kNotFound;
    ReportCorrupt(address, info.region_id, "its header or identity");
    return status;
  }
  return std::shared_ptr<BlockReader>(std::make_shared<VerifyingReader>(
      *this, std::move(info), std::move(stored), std::move(opened->source), std::move(opened->checksums),
      client));
}

std::optional<LookupResult> StoreReads::PrefixHitLocked(const CacheIdentity& want,
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

LookupResult StoreReads::Lookup(const CacheIdentity& identity) {
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
