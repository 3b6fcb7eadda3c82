// IndexedStore: committed blocks: the index, reads, lookups, eviction and quarantine entry.
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <set>

#include "store/indexed_store.h"

namespace gpucache {
namespace {

std::string ChecksumText(const BlockDigest& digest) { return "xxh3-128:" + FormatBlockName(digest); }

}  // namespace

namespace {

// XXH3-64 of "tenant/ns/block", without allocating for names of the usual lengths.
PolicyKey PolicyKeyOfParts(std::string_view tenant, std::string_view ns, std::string_view block) {
  char buf[512];
  size_t n = tenant.size() + ns.size() + block.size() + 2;
  if (n > sizeof(buf)) {
    std::string s = std::string(tenant) + '/' + std::string(ns) + '/' + std::string(block);
    return XXH3_64bits(s.data(), s.size());
  }
  char* p = std::copy(tenant.begin(), tenant.end(), buf);
  *p++ = '/';
  p = std::copy(ns.begin(), ns.end(), p);
  *p++ = '/';
  std::copy(block.begin(), block.end(), p);
  return XXH3_64bits(buf, n);
}

}  // namespace

PolicyKey PolicyKeyOf(const BlockAddress& a) { return PolicyKeyOfParts(a.tenant, a.ns, a.block); }

std::string_view ToString(MissReason reason) {
  switch (reason) {
    case MissReason::kAbsent: return "absent";
    case MissReason::kIncompatible: return "incompatible";
    case MissReason::kQuarantined: return "quarantined";
    case MissReason::kFenced: return "fenced";
  }
  return "unknown";
}

std::string_view ToString(LookupResult::Kind kind) {
  switch (kind) {
    case LookupResult::Kind::kHit: return "hit";
    case LookupResult::Kind::kPrefixHit: return "prefix_hit";
    case LookupResult::Kind::kMiss: return "miss";
  }
  return "unknown";
}

std::string_view ToString(RemovalReason reason) {
  switch (reason) {
    case RemovalReason::kEvicted: return "evicted";
    case RemovalReason::kCorrupt: return "corrupt";
    case RemovalReason::kLost: return "lost";
  }
  return "unknown";
}

std::string_view ToString(FillState state) {
  switch (state) {
    case FillState::kPending: return "pending";
    case FillState::kFinished: return "finished";
    case FillState::kFailed: return "failed";
    case FillState::kFenced: return "fenced";
  }
  return "unknown";
}

// Serves a committed block's bytes only after the chunks they come from verified. While it
// lives, the block counts as open: evicting it quarantines it instead of freeing it.
class VerifyingReader final : public BlockReader {
 public:
  VerifyingReader(IndexedStore& store, BlockInfo info, std::unique_ptr<RawSource> src,
                  PayloadChecksums sums)
      : store_(store), info_(std::move(info)), src_(std::move(src)), sums_(std::move(sums)) {}
  ~VerifyingReader() override { store_.ReaderClosed(info_.address, info_.region_id); }

  const BlockInfo& info() const override { return info_; }

  Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) override {
    if (offset >= info_.size || out.empty()) return size_t{0};
    uint64_t end = std::min<uint64_t>(info_.size, offset + out.size());
    uint64_t cs = sums_.chunk_size;
    uint64_t first = offset / cs, last = (end - 1) / cs;
    uint64_t span_start = first * cs;
    uint64_t span_end = std::min<uint64_t>(info_.size, (last + 1) * cs);
    thread_local std::vector<uint8_t> buf;
    buf.resize(span_end - span_start);
    if (StatusCode s = src_->ReadRaw(span_start, buf); s != StatusCode::kOk) return s;
    for (uint64_t c = first; c <= last; ++c) {
      uint64_t at = c * cs - span_start;
      uint64_t len = std::min<uint64_t>(cs, info_.size - c * cs);
      if (ChunkChecksum({buf.data() + at, len}, c) != sums_.chunks[c]) {
        store_.ReportCorrupt(info_.address, info_.region_id);
        return StatusCode::kChecksumMismatch;
      }
    }
    std::copy_n(buf.data() + (offset - span_start), end - offset, out.data());
    return size_t(end - offset);
  }

 private:
  IndexedStore& store_;
  const BlockInfo info_;
  std::unique_ptr<RawSource> src_;
  const PayloadChecksums sums_;
};

// --- The index ---------------------------------------------------------------------------

IndexedStore::Namespace* IndexedStore::NamespaceLocked(std::string_view tenant, std::string_view ns) {
  auto it = namespaces_.find(std::pair<std::string_view, std::string_view>(tenant, ns));
  return it == namespaces_.end() ? nullptr : &it->second;
}

IndexedStore::Namespace& IndexedStore::AddNamespaceLocked(const std::string& tenant,
                                                          const std::string& ns, Owner owner) {
  auto found = namespaces_.find(std::pair<std::string_view, std::string_view>(tenant, ns));
  if (found != namespaces_.end()) return found->second;
  auto it = namespaces_.try_emplace(NamespaceKey{tenant, ns}).first;
  it->second.owner = owner;
  if (!free_ns_ids_.empty()) {
    it->second.id = free_ns_ids_.back();
    free_ns_ids_.pop_back();
    ns_by_id_[it->second.id] = it;
  } else {
    it->second.id = static_cast<uint32_t>(ns_by_id_.size());
    ns_by_id_.push_back(it);
  }
  return it->second;
}

std::optional<IndexedStore::BlockRef> IndexedStore::FindBlockLocked(const BlockAddress& address) {
  std::optional<BlockDigest> name = ParseBlockName(address.block);
  if (!name) return std::nullopt;
  Namespace* ns = NamespaceLocked(address.tenant, address.ns);
  if (!ns) return std::nullopt;
  auto it = ns->blocks.find(*name);
  if (it == ns->blocks.end()) return std::nullopt;
  return it;
}

BlockAddress IndexedStore::AddressOfLocked(BlockRef it) const {
  const NamespaceKey& key = NamespaceKeyOf(it->second.ns);
  return BlockAddress{key.first, key.second, FormatBlockName(it->first)};
}

BlockInfo IndexedStore::AttributesOfLocked(BlockRef it) const {
  const Record& r = it->second;
  BlockInfo info;
  info.address = AddressOfLocked(it);
  info.size = r.size;
  info.commit_epoch = r.commit_epoch;
  info.region_id = r.region_id;
  info.owner = r.owner;
  info.commit_time_ns = r.commit_time_ns;
  info.checksum = ChecksumText(r.checksum);
  info.pinned = r.pinned;
  return info;
}

bool IndexedStore::IndexLocked(const BlockAddress& address, Record record) {
  std::optional<BlockDigest> name = ParseBlockName(address.block);
  if (!name) return false;
  // Restores come a namespace at a time: the previous block's namespace is likely this one's.
  Namespace& ns = last_indexed_ns_ && (*last_indexed_ns_)->first.first == address.tenant &&
                          (*last_indexed_ns_)->first.second == address.ns
                      ? (*last_indexed_ns_)->second
                      : AddNamespaceLocked(address.tenant, address.ns, record.owner);
  last_indexed_ns_ = ns_by_id_[ns.id];
  record.ns = ns.id;
  auto [it, inserted] = ns.blocks.try_emplace(*name, std::move(record));
  if (!inserted) return false;
  block_count_++;
  const Record& r = it->second;
  Usage& u = CountersLocked(address.tenant).usage;
  u.blocks++;
  u.bytes += r.size;
  by_logical_[r.keys.logical]++;
  by_parent_.emplace(NsDigest{ns.id, r.keys.parent}, it);
  by_tail_[NsDigest{ns.id, r.keys.tail}] = it;
  std::optional<PolicyKey> parent;
  // The resident block whose last chain hash is this block's parent hash, if any.
  if (auto p = by_tail_.find(NsDigest{ns.id, r.keys.parent}); p != by_tail_.end() && p->second != it) {
    const NamespaceKey& pk = NamespaceKeyOf(p->second->second.ns);
    parent = PolicyKeyOfParts(pk.first, pk.second, FormatBlockName(p->second->first));
  }
  PolicyKey key = PolicyKeyOf(address);
  by_key_[key] = it;
  policy_->OnInsert(key, parent, r.keys.valid_length < r.keys.block_capacity);
  return true;
}

IndexedStore::Record IndexedStore::UnindexLocked(BlockRef it) {
  BlockAddress address = AddressOfLocked(it);
  Record& r = it->second;
  Usage& u = CountersLocked(address.tenant).usage;
  u.blocks--;
  u.bytes -= r.size;
  if (auto l = by_logical_.find(r.keys.logical); l != by_logical_.end() && --l->second == 0) {
    by_logical_.erase(l);
  }
  auto [lo, hi] = by_parent_.equal_range(NsDigest{r.ns, r.keys.parent});
  for (auto i = lo; i != hi; ++i) {
    if (i->second == it) {
      by_parent_.erase(i);
      break;
    }
  }
  auto tail = by_tail_.find(NsDigest{r.ns, r.keys.tail});
  if (tail != by_tail_.end() && tail->second == it) by_tail_.erase(tail);
  PolicyKey key = PolicyKeyOf(address);
  by_key_.erase(key);
  policy_->OnRemove(key);
  Record record = std::move(r);
  ns_by_id_[record.ns]->second.blocks.erase(it);
  block_count_--;
  return record;
}

IndexedStore::Departure IndexedStore::RemoveLocked(BlockRef it, const char* reason) {
  int open = it->second.open_readers;
  BlockInfo info = AttributesOfLocked(it);
  Record r = UnindexLocked(it);
  Departure d{info, r.stored, open > 0};
  if (d.quarantine) {
    // The bytes may still be in use through an open handle: they stay, counted, until a
    // drained attestation or a fenced reclaim.
    Usage& u = CountersLocked(info.address.tenant).usage;
    u.quarantined_blocks++;
    u.quarantined_bytes += info.size;
    CountersLocked(info.address.tenant).quarantined++;
    info.state = BlockState::kQuarantined;
    quarantine_[info.region_id] = Quarantined{std::move(info), r.stored, open, reason, epoch_.load()};
  }
  return d;
}

// Medium work for blocks that left the namespace, outside the lock.
void IndexedStore::Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify) {
  RemovalObserver observer;
  {
    std::lock_guard lock(mu_);
    observer = observer_;
  }
  for (Departure& d : departures) {
    if (d.quarantine) {
      auto moved = medium_->Quarantine(d.info, d.stored);
      std::lock_guard lock(mu_);
      auto q = quarantine_.find(d.info.region_id);
      if (q != quarantine_.end()) q->second.stored = std::move(moved);
    } else {
      medium_->Drop(d.info, d.stored);
    }
    if (notify && observer) observer(d.info.address, *notify);
  }
}

// --- Making room -------------------------------------------------------------------------

StatusCode IndexedStore::MakeRoomForCommitLocked(const std::string& tenant, uint64_t need,
                                                 std::vector<Departure>& out) {
  Usage global = GlobalUsageLocked();
  auto it = counters_.find(tenant);
  Usage mine = it == counters_.end() ? Usage{} : it->second.usage;
  uint64_t tenant_limit = options_.limits.Tenant(tenant).max_retained_bytes;
  uint64_t global_limit = options_.limits.global.max_retained_bytes;
  if (tenant_limit && need > tenant_limit) return StatusCode::kTenantQuota;
  if (global_limit && need > global_limit) return StatusCode::kNoSpace;
  RoomRequest req{.tenant = tenant, .shares_of = global_limit};
  if (tenant_limit && mine.retained_bytes() + need > tenant_limit) {
    req.own = mine.retained_bytes() + need - tenant_limit;
  }
  if (global_limit && global.retained_bytes() + need > global_limit) {
    req.shared = global.retained_bytes() + need - global_limit;
  }
  if (req.own == 0 && req.shared == 0) return StatusCode::kOk;
  return MakeRoomLocked(req, out);
}

StatusCode IndexedStore::MakeRegistrationRoomLocked(const std::string& tenant,
                                                    std::vector<Departure>& out) {
  uint64_t tenant_limit = options_.limits.Tenant(tenant).max_registrations;
  uint64_t global_limit = options_.limits.global.max_registrations;
  auto it = counters_.find(tenant);
  uint64_t mine = it == counters_.end() ? 0 : it->second.usage.registrations();
  uint64_t all = GlobalUsageLocked().registrations();
  RoomRequest req{.tenant = tenant, .count_blocks = true, .shares_of = global_limit,
                  .own_refusal = StatusCode::kExhausted, .shared_refusal = StatusCode::kExhausted};
  if (tenant_limit && mine + 1 > tenant_limit) req.own = mine + 1 - tenant_limit;
  if (global_limit && all + 1 > global_limit) req.shared = all + 1 - global_limit;
  if (req.own == 0 && req.shared == 0) return StatusCode::kOk;
  return MakeRoomLocked(req, out);
}

uint64_t IndexedStore::FairShareLocked(std::string_view tenant, uint64_t total) const {
  uint64_t holders = 0;
  bool counted = false;
  for (const auto& [name, c] : counters_) {
    if (c.usage.registrations() == 0 && c.usage.retained_bytes() == 0 && name != tenant) continue;
    holders++;
    counted |= name == tenant;
  }
  if (!counted) holders++;
  return total / holders;
}

StatusCode IndexedStore::MakeRoomLocked(const RoomRequest& req, std::vector<Departure>& out) {
  if (!policy_sized_) {
    policy_->SetCapacity(block_count_);
    policy_sized_ = true;
  }
  const uint64_t share = FairShareLocked(req.tenant, req.shares_of);
  // Choose every victim first; evict only if they suffice, so a refusal changes nothing.
  std::set<PolicyKey> chosen;
  std::map<std::string_view, uint64_t> taken;  // per other tenant, bytes chosen so far
  uint64_t freed_own = 0, freed_shared = 0;
  auto amount = [&](const Record& r) { return req.count_blocks ? uint64_t{1} : r.size; };
  auto may_go = [&](const Record& r, bool own_only) {
    if (r.pinned || r.open_readers != 0) return false;
    if (req.device && !medium_->SharesDevice(*req.device, r.stored.get())) return false;
    std::string_view owner = NamespaceKeyOf(r.ns).first;
    if (owner == req.tenant) return true;
    if (own_only) return false;
    // Another tenant's block, only while that tenant keeps at least its fair share.
    auto c = counters_.find(std::string(owner));
    uint64_t held = c == counters_.end() ? 0
                    : req.count_blocks ? c->second.usage.registrations()
                                       : c->second.usage.retained_bytes();
    return held >= taken[owner] + amount(r) + share;
  };
  auto pick = [&](bool own_only) -> bool {
    auto v = policy_->Victim([&](PolicyKey k) {
      if (chosen.count(k)) return false;
      auto a = by_key_.find(k);
      return a != by_key_.end() && may_go(a->second->second, own_only);
    });
    if (!v) return false;
    chosen.insert(*v);
    const Record& r = by_key_.at(*v)->second;
    std::string_view owner = NamespaceKeyOf(r.ns).first;
    if (owner == req.tenant) freed_own += amount(r);
    else taken[owner] += amount(r);
    freed_shared += amount(r);
    return true;
  };
  while (freed_own < req.own) {
    if (!pick(true)) return req.own_refusal;
  }
  while (freed_shared < req.shared) {
    if (!pick(false)) return req.shared_refusal;
  }
  for (PolicyKey k : chosen) {
    BlockRef it = by_key_.at(k);
    CountersLocked(NamespaceKeyOf(it->second.ns).first).evictions++;
    out.push_back(RemoveLocked(it, "evicted"));
  }
  return StatusCode::kOk;
}

StatusCode IndexedStore::MakeDeviceRoom(const PendingPayload& p, const std::string& tenant,
                                        uint64_t need) {
  // Filesystems keep some slack of their own (metadata, rounding to blocks).
  constexpr uint64_t kSlack = 256 << 10;
  std::optional<Medium::DeviceSpace> space = medium_->SpaceFor(p);  // I/O: before the lock
  std::vector<Departure> evicted;
  StatusCode s;
  {
    std::lock_guard lock(mu_);
    uint64_t free = space ? space->free : 0;
    uint64_t short_by = need + kSlack - std::min(need + kSlack, free);
    uint64_t capacity = GlobalUsageLocked().retained_bytes();
    if (space) capacity = space->total;
    // The fair shares are of the device's whole size, not of what is left on it.
    RoomRequest req{.tenant = tenant, .shared = short_by, .shares_of = capacity, .device = &p};
    // The device says it has room: the ENOSPC is not one eviction can answer.
    s = short_by == 0 ? StatusCode::kNoSpace : MakeRoomLocked(req, evicted);
  }
  Finish(std::move(evicted), RemovalReason::kEvicted);
  return s;
}

// --- Reading -----------------------------------------------------------------------------

Result<BlockInfo> IndexedStore::StatAttributes(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = FindBlockLocked(address);
  if (!it) return StatusCode::kNotFound;
  return AttributesOfLocked(*it);
}

Result<BlockInfo> IndexedStore::Stat(const BlockAddress& address) {
  BlockInfo info;
  std::shared_ptr<StoredPayload> stored;
  uint64_t identity_digest;
  {
    std::lock_guard lock(mu_);
    auto it = FindBlockLocked(address);
    if (!it) return StatusCode::kNotFound;
    info = AttributesOfLocked(*it);
    stored = (*it)->second.stored;
    identity_digest = (*it)->second.keys.identity;
  }
  Result<Bytes> canonical = medium_->ReadIdentity(info, stored);
  if (canonical.ok() && IdentityDigest(canonical.value()) == identity_digest) {
    if (Result<CacheIdentity> id = DecodePhysicalKey(canonical.value()); id.ok()) {
      info.identity = std::move(id.value());
      info.canonical_identity = std::move(canonical.value());
      return info;
    }
  }
  if (!canonical.ok() && canonical.status() != StatusCode::kChecksumMismatch) {
    return canonical.status();
  }
  // The medium no longer holds what was committed there: the block is gone, as an open of it
  // would find.
  ReportCorrupt(address, info.region_id);
  return StatusCode::kNotFound;
}

Result<BlockInfo> IndexedStore::Probe(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = FindBlockLocked(address);
  TenantCounters& c = CountersLocked(address.tenant);
  if (!it) {
    c.misses++;
    policy_->OnMiss(PolicyKeyOf(address));
    return StatusCode::kNotFound;
  }
  c.hits++;  // the use itself is counted for the policy when the block is opened
  return AttributesOfLocked(*it);
}

Result<std::shared_ptr<BlockReader>> IndexedStore::Open(const BlockAddress& address) {
  BlockInfo info;
  std::shared_ptr<StoredPayload> stored;
  uint64_t identity_digest;
  {
    std::lock_guard lock(mu_);
    auto it = FindBlockLocked(address);
    if (!it) {
      policy_->OnMiss(PolicyKeyOf(address));
      return StatusCode::kNotFound;
    }
    (*it)->second.open_readers++;  // the reader's destructor gives it back
    policy_->OnAccess(PolicyKeyOf(address));
    info = AttributesOfLocked(*it);
    stored = (*it)->second.stored;
    identity_digest = (*it)->second.keys.identity;
  }
  Result<Medium::Opened> opened = medium_->Open(info, stored);
  StatusCode status = opened.status();
  if (opened.ok()) {
    // The medium's identity must be the one committed: a file replaced or damaged since it was
    // indexed is caught here, before any payload byte is served.
    Result<CacheIdentity> id = IdentityDigest(opened->identity) == identity_digest
                                   ? DecodePhysicalKey(opened->identity)
                                   : Result<CacheIdentity>(StatusCode::kInvalidArgument);
    if (id.ok()) {
      info.identity = std::move(id.value());
      info.canonical_identity = std::move(opened->identity);
    } else {
      status = StatusCode::kChecksumMismatch;
    }
  }
  if (status != StatusCode::kOk) {
    ReaderClosed(address, info.region_id);
    if (status == StatusCode::kChecksumMismatch) ReportCorrupt(address, info.region_id);
    return status;
  }
  return std::shared_ptr<BlockReader>(std::make_shared<VerifyingReader>(
      *this, std::move(info), std::move(opened->source), std::move(opened->checksums)));
}

void IndexedStore::ReaderClosed(const BlockAddress& address, uint64_t region_id) {
  std::lock_guard lock(mu_);
  auto it = FindBlockLocked(address);
  if (it && (*it)->second.region_id == region_id) {
    (*it)->second.open_readers--;
    return;
  }
  // Last close of a quarantined block does not free it: only reclaim does.
  auto q = quarantine_.find(region_id);
  if (q != quarantine_.end() && q->second.open_readers > 0) q->second.open_readers--;
}

std::optional<LookupResult> IndexedStore::PrefixHitLocked(const CacheIdentity& want,
                                                          const BlockAddress& self) {
  Namespace* ns = NamespaceLocked(self.tenant, self.ns);
  if (!ns) return std::nullopt;
  auto [lo, hi] = by_parent_.equal_range(NsDigest{ns->id, XXH3_64bits(want.chain[0].data(), want.chain[0].size())});
  // A candidate is a prefix when its chain is a strict prefix of the wanted one and its
  // multimodal inputs are the same: its ChainDigest equals the wanted chain's, cut to its
  // length. Digests of the wanted chain, by length, computed once each.
  std::vector<std::optional<uint64_t>> digests(want.chain.size());
  std::optional<BlockRef> best;
  for (auto it = lo; it != hi; ++it) {
    const IndexKeys& have = it->second->second.keys;
    if (have.chain_length >= want.chain.size()) continue;
    std::optional<uint64_t>& d = digests[have.chain_length];
    if (!d) d = ChainDigest(want, have.chain_length);
    if (have.prefix != *d) continue;
    if (have.valid_length > want.valid_length) continue;  // never longer than asked
    if (!best || have.chain_length > (*best)->second.keys.chain_length) best = it->second;
  }
  if (!best) return std::nullopt;
  return LookupResult{LookupResult::Kind::kPrefixHit, MissReason::kAbsent, AddressOfLocked(*best),
                      (*best)->second.keys.valid_length};
}

LookupResult IndexedStore::Lookup(const CacheIdentity& identity) {
  if (Validate(identity) != StatusCode::kOk) return {};
  BlockAddress address = AddressOf(identity);
  uint64_t canonical = IdentityDigest(EncodePhysicalKey(identity));
  Bytes logical_key = EncodeLogicalKey(identity);
  uint64_t logical = XXH3_64bits(logical_key.data(), logical_key.size());
  std::lock_guard lock(mu_);
  TenantCounters& c = CountersLocked(identity.tenant);
  if (auto it = FindBlockLocked(address); it && (*it)->second.keys.identity == canonical) {
    c.hits++;
    return {LookupResult::Kind::kHit, MissReason::kAbsent, address, identity.valid_length};
  }
  if (auto prefix = PrefixHitLocked(identity, address)) {
    c.prefix_hits++;
    return *prefix;
  }
  c.misses++;
  policy_->OnMiss(PolicyKeyOf(address));
  LookupResult miss;
  if (by_logical_.count(logical)) {
    miss.reason = MissReason::kIncompatible;
    c.misses_incompatible++;
  } else if (auto o = outcomes_.find(address);
             o != outcomes_.end() && o->second.state == FillState::kFenced) {
    miss.reason = MissReason::kFenced;
    c.misses_fenced++;
  } else {
    for (const auto& [region, q] : quarantine_) {
      if (q.info.address == address) miss.reason = MissReason::kQuarantined;
    }
    if (miss.reason == MissReason::kQuarantined) c.misses_quarantined++;
  }
  return miss;
}

}  // namespace gpucache
