// IndexedStore: committed blocks: the index, reads, lookups, eviction and quarantine entry.
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <set>

#include "store/indexed_store.h"

namespace gpucache {
namespace {

bool IsStrictPrefix(const std::vector<Bytes>& shorter, const std::vector<Bytes>& longer) {
  return shorter.size() < longer.size() && std::equal(shorter.begin(), shorter.end(), longer.begin());
}

}  // namespace

PolicyKey PolicyKeyOf(const BlockAddress& a) {
  std::string s = a.tenant + '/' + a.ns + '/' + a.block;
  return XXH3_64bits(s.data(), s.size());
}

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
  VerifyingReader(IndexedStore& store, BlockInfo info, std::unique_ptr<IndexedStore::RawSource> src,
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
  std::unique_ptr<IndexedStore::RawSource> src_;
  const PayloadChecksums sums_;
};

// --- The index ---------------------------------------------------------------------------

std::optional<BlockAddress> IndexedStore::ParentOfLocked(const BlockInfo& info) {
  auto it = by_tail_.find(ParentKey{info.address.tenant, info.address.ns, info.identity.chain[0]});
  if (it == by_tail_.end()) return std::nullopt;
  return it->second;
}

void IndexedStore::IndexLocked(Record record) {
  const BlockInfo& info = record.info;
  Usage& u = CountersLocked(info.address.tenant).usage;
  u.blocks++;
  u.bytes += info.size;
  by_logical_.emplace(Xxh128Hex(EncodeLogicalKey(info.identity)), info.address);
  by_parent_.emplace(ParentKey{info.address.tenant, info.address.ns, info.identity.chain[0]},
                     info.address);
  by_tail_[ParentKey{info.address.tenant, info.address.ns, info.identity.chain.back()}] = info.address;
  std::optional<PolicyKey> parent;
  if (auto p = ParentOfLocked(info); p && *p != info.address && blocks_.count(*p)) {
    parent = PolicyKeyOf(*p);
  }
  PolicyKey key = PolicyKeyOf(info.address);
  by_key_[key] = info.address;
  policy_->OnInsert(key, parent, info.identity.valid_length < info.identity.block_capacity);
  BlockAddress address = info.address;
  blocks_[address] = std::move(record);
}

IndexedStore::Record IndexedStore::UnindexLocked(std::map<BlockAddress, Record>::iterator it) {
  Record record = std::move(it->second);
  const BlockInfo& info = record.info;
  blocks_.erase(it);
  Usage& u = CountersLocked(info.address.tenant).usage;
  u.blocks--;
  u.bytes -= info.size;
  auto erase_one = [&](auto& multimap, const auto& key) {
    auto [lo, hi] = multimap.equal_range(key);
    for (auto i = lo; i != hi; ++i) {
      if (i->second == info.address) {
        multimap.erase(i);
        return;
      }
    }
  };
  erase_one(by_logical_, Xxh128Hex(EncodeLogicalKey(info.identity)));
  erase_one(by_parent_, ParentKey{info.address.tenant, info.address.ns, info.identity.chain[0]});
  auto tail = by_tail_.find(ParentKey{info.address.tenant, info.address.ns, info.identity.chain.back()});
  if (tail != by_tail_.end() && tail->second == info.address) by_tail_.erase(tail);
  PolicyKey key = PolicyKeyOf(info.address);
  by_key_.erase(key);
  policy_->OnRemove(key);
  return record;
}

IndexedStore::Departure IndexedStore::RemoveLocked(std::map<BlockAddress, Record>::iterator it,
                                                   const char* reason) {
  int open = it->second.open_readers;
  Record r = UnindexLocked(it);
  Departure d{r.info, r.stored, open > 0};
  if (d.quarantine) {
    // The bytes may still be in use through an open handle: they stay, counted, until a
    // drained attestation or a fenced reclaim.
    Usage& u = CountersLocked(r.info.address.tenant).usage;
    u.quarantined_blocks++;
    u.quarantined_bytes += r.info.size;
    CountersLocked(r.info.address.tenant).quarantined++;
    r.info.state = BlockState::kQuarantined;
    quarantine_[r.info.region_id] = Quarantined{r.info, r.stored, open, reason, epoch_.load()};
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
      auto moved = DoQuarantine(d.info, d.stored);
      std::lock_guard lock(mu_);
      auto q = quarantine_.find(d.info.region_id);
      if (q != quarantine_.end()) q->second.stored = std::move(moved);
    } else {
      DoDrop(d.info, d.stored);
    }
    if (notify && observer) observer(d.info.address, *notify);
  }
}

// --- Making room -------------------------------------------------------------------------

StatusCode IndexedStore::MakeRoomLocked(const std::string& tenant, uint64_t need,
                                        std::vector<Departure>& out) {
  Usage global = GlobalUsageLocked();
  auto it = counters_.find(tenant);
  Usage mine = it == counters_.end() ? Usage{} : it->second.usage;
  uint64_t tenant_limit = tenant.empty() ? 0 : options_.limits.Tenant(tenant).max_retained_bytes;
  uint64_t global_limit = options_.limits.global.max_retained_bytes;
  // With no tenant (a full disk), free `need` bytes from anyone.
  uint64_t tenant_excess = tenant_limit && mine.retained_bytes() + need > tenant_limit
                               ? mine.retained_bytes() + need - tenant_limit : 0;
  uint64_t global_excess = tenant.empty() ? need
                           : global_limit && global.retained_bytes() + need > global_limit
                               ? global.retained_bytes() + need - global_limit : 0;
  if (tenant_limit && need > tenant_limit) return StatusCode::kTenantQuota;
  if (global_limit && need > global_limit) return StatusCode::kNoSpace;

  // Choose every victim first; evict only if they suffice, so a refusal changes nothing.
  std::set<PolicyKey> chosen;
  uint64_t freed_tenant = 0, freed_global = 0;
  auto pick = [&](bool own_tenant_only) -> bool {
    if (!policy_sized_) {
      policy_->SetCapacity(blocks_.size());
      policy_sized_ = true;
    }
    auto v = policy_->Victim([&](PolicyKey k) {
      if (chosen.count(k)) return false;
      auto a = by_key_.find(k);
      if (a == by_key_.end()) return false;
      const Record& r = blocks_.at(a->second);
      return !r.info.pinned && r.open_readers == 0 &&
             (!own_tenant_only || r.info.address.tenant == tenant);
    });
    if (!v) return false;
    chosen.insert(*v);
    const Record& r = blocks_.at(by_key_.at(*v));
    if (r.info.address.tenant == tenant) freed_tenant += r.info.size;
    freed_global += r.info.size;
    return true;
  };
  while (freed_tenant < tenant_excess) {
    if (!pick(true)) return StatusCode::kTenantQuota;
  }
  while (freed_global < global_excess) {
    if (!pick(false)) return tenant.empty() && !chosen.empty() ? StatusCode::kOk : StatusCode::kNoSpace;
  }
  for (PolicyKey k : chosen) {
    auto a = by_key_.at(k);
    CountersLocked(a.tenant).evictions++;
    out.push_back(RemoveLocked(blocks_.find(a), "evicted"));
  }
  return StatusCode::kOk;
}

// --- Reading -----------------------------------------------------------------------------

Result<BlockInfo> IndexedStore::Stat(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(address);
  if (it == blocks_.end()) return StatusCode::kNotFound;
  return it->second.info;
}

Result<BlockInfo> IndexedStore::Probe(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(address);
  TenantCounters& c = CountersLocked(address.tenant);
  if (it == blocks_.end()) {
    c.misses++;
    policy_->OnMiss(PolicyKeyOf(address));
    return StatusCode::kNotFound;
  }
  c.hits++;  // the use itself is counted for the policy when the block is opened
  return it->second.info;
}

Result<std::shared_ptr<BlockReader>> IndexedStore::Open(const BlockAddress& address) {
  Record record;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) {
      policy_->OnMiss(PolicyKeyOf(address));
      return StatusCode::kNotFound;
    }
    it->second.open_readers++;  // the reader's destructor gives it back
    policy_->OnAccess(PolicyKeyOf(address));
    record = it->second;
  }
  Result<Opened> opened = DoOpen(record.info, record.stored);
  if (!opened.ok()) {
    ReaderClosed(address, record.info.region_id);
    if (opened.status() == StatusCode::kChecksumMismatch) {
      ReportCorrupt(address, record.info.region_id);
    }
    return opened.status();
  }
  return std::shared_ptr<BlockReader>(std::make_shared<VerifyingReader>(
      *this, std::move(record.info), std::move(opened->source), std::move(opened->checksums)));
}

void IndexedStore::ReaderClosed(const BlockAddress& address, uint64_t region_id) {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(address);
  if (it != blocks_.end() && it->second.info.region_id == region_id) {
    it->second.open_readers--;
    return;
  }
  // Last close of a quarantined block does not free it: only reclaim does.
  auto q = quarantine_.find(region_id);
  if (q != quarantine_.end() && q->second.open_readers > 0) q->second.open_readers--;
}

std::optional<LookupResult> IndexedStore::PrefixHitLocked(const CacheIdentity& want) {
  BlockAddress self = AddressOf(want);
  auto [lo, hi] = by_parent_.equal_range(ParentKey{self.tenant, self.ns, want.chain[0]});
  const BlockInfo* best = nullptr;
  for (auto it = lo; it != hi; ++it) {
    const BlockInfo& have = blocks_.at(it->second).info;
    if (!IsStrictPrefix(have.identity.chain, want.chain)) continue;
    if (have.identity.multimodal != want.multimodal) continue;
    if (have.identity.valid_length > want.valid_length) continue;  // never longer than asked
    if (!best || have.identity.chain.size() > best->identity.chain.size()) best = &have;
  }
  if (!best) return std::nullopt;
  return LookupResult{LookupResult::Kind::kPrefixHit, MissReason::kAbsent, best->address,
                      best->identity.valid_length};
}

LookupResult IndexedStore::Lookup(const CacheIdentity& identity) {
  if (Validate(identity) != StatusCode::kOk) return {};
  BlockAddress address = AddressOf(identity);
  Bytes canonical = EncodePhysicalKey(identity);
  std::lock_guard lock(mu_);
  TenantCounters& c = CountersLocked(identity.tenant);
  if (auto it = blocks_.find(address);
      it != blocks_.end() && it->second.info.canonical_identity == canonical) {
    c.hits++;
    return {LookupResult::Kind::kHit, MissReason::kAbsent, address, identity.valid_length};
  }
  if (auto prefix = PrefixHitLocked(identity)) {
    c.prefix_hits++;
    return *prefix;
  }
  c.misses++;
  policy_->OnMiss(PolicyKeyOf(address));
  LookupResult miss;
  if (by_logical_.count(Xxh128Hex(EncodeLogicalKey(identity)))) {
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

// --- Leaving the namespace ---------------------------------------------------------------

StatusCode IndexedStore::Invalidate(const BlockAddress& address) {
  std::vector<Departure> gone;
  bool was_pinned;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return StatusCode::kNotFound;
    was_pinned = it->second.info.pinned;
    CountersLocked(address.tenant).invalidations++;
    gone.push_back(RemoveLocked(it, "invalidated"));
  }
  Finish(std::move(gone), std::nullopt);  // the kernel made this change itself (unlink)
  if (was_pinned) PersistPins();
  return StatusCode::kOk;
}

StatusCode IndexedStore::Evict(const BlockAddress& address) {
  std::vector<Departure> gone;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return StatusCode::kNotFound;
    if (it->second.info.pinned) return StatusCode::kBusy;
    CountersLocked(address.tenant).evictions++;
    gone.push_back(RemoveLocked(it, "evicted"));
  }
  Finish(std::move(gone), RemovalReason::kEvicted);
  return StatusCode::kOk;
}

StatusCode IndexedStore::SetPinned(const BlockAddress& address, bool pinned) {
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return StatusCode::kNotFound;
    if (it->second.info.pinned == pinned) return StatusCode::kOk;
    it->second.info.pinned = pinned;
  }
  PersistPins();
  return StatusCode::kOk;
}

void IndexedStore::PersistPins() {
  std::vector<BlockAddress> pinned;
  {
    std::lock_guard lock(mu_);
    for (const auto& [address, r] : blocks_) {
      if (r.info.pinned) pinned.push_back(address);
    }
  }
  DoPersistPins(pinned);
}

size_t IndexedStore::ForgetIf(
    const std::function<bool(const BlockInfo&, const StoredPayload*)>& lost) {
  std::vector<BlockAddress> gone;
  RemovalObserver observer;
  {
    std::lock_guard lock(mu_);
    for (const auto& [address, r] : blocks_) {
      if (lost(r.info, r.stored.get())) gone.push_back(address);
    }
    for (const BlockAddress& a : gone) UnindexLocked(blocks_.find(a));
    observer = observer_;
  }
  if (observer) {
    for (const BlockAddress& a : gone) observer(a, RemovalReason::kLost);
  }
  return gone.size();
}

void IndexedStore::ForEachBlock(
    const std::function<void(const BlockInfo&, const StoredPayload*)>& fn) {
  std::lock_guard lock(mu_);
  for (const auto& [address, r] : blocks_) fn(r.info, r.stored.get());
}

void IndexedStore::ReportCorrupt(const BlockAddress& address, uint64_t region_id) {
  std::vector<Departure> gone;
  bool was_pinned;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    // Already gone: another read (the kernel retries a failed page) found it first. One
    // corrupt block counts once.
    if (it == blocks_.end() || it->second.info.region_id != region_id) return;
    was_pinned = it->second.info.pinned;
    CountersLocked(address.tenant).checksum_failures++;
    Record r = UnindexLocked(it);
    gone.push_back(Departure{r.info, r.stored, false});  // wrong bytes are never kept
  }
  Finish(std::move(gone), RemovalReason::kCorrupt);
  // The pin leaves with the block: a stale entry in the persisted pins would pin whatever is
  // committed at that path next, from the next restart on (found by the reliability suite's
  // model tester, tests/reliability/model_test.cc).
  if (was_pinned) PersistPins();
}

}  // namespace gpucache
