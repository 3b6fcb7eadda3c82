#include "store/indexed_store.h"

#include <time.h>

#include <algorithm>
#include <cassert>
#include <vector>

#include "store/block_file.h"

namespace gpucache {
namespace {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void Transition(BlockState& state, BlockState to) {
  assert(CanTransition(state, to));
  state = to;
}

bool IsStrictPrefix(const std::vector<Bytes>& shorter, const std::vector<Bytes>& longer) {
  return shorter.size() < longer.size() && std::equal(shorter.begin(), shorter.end(), longer.begin());
}

}  // namespace

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

// Serves a committed block's bytes only after the chunks they come from verified.
class VerifyingReader final : public BlockReader {
 public:
  VerifyingReader(IndexedStore& store, BlockInfo info, std::unique_ptr<IndexedStore::RawSource> src,
                  PayloadChecksums sums)
      : store_(store), info_(std::move(info)), src_(std::move(src)), sums_(std::move(sums)) {}

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

IndexedStore::IndexedStore(StoreOptions options) : options_(options) {}
IndexedStore::~IndexedStore() = default;

// --- Namespaces -------------------------------------------------------------------------

StatusCode IndexedStore::CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) {
  if (!IsValidTenantName(tenant) || !IsValidNamespaceName(ns)) return StatusCode::kInvalidArgument;
  NamespaceKey key{std::string(tenant), std::string(ns)};
  {
    std::lock_guard lock(mu_);
    if (namespaces_.count(key)) return StatusCode::kExists;
  }
  if (StatusCode s = DoCreateNamespace(tenant, ns, owner); s != StatusCode::kOk) return s;
  std::lock_guard lock(mu_);
  return namespaces_.emplace(key, Namespace{owner}).second ? StatusCode::kOk : StatusCode::kExists;
}

StatusCode IndexedStore::RemoveNamespace(std::string_view tenant, std::string_view ns) {
  std::unique_lock lock(mu_);
  NamespaceKey key{std::string(tenant), std::string(ns)};
  if (!namespaces_.count(key)) return StatusCode::kNotFound;
  BlockAddress lo{key.first, key.second, ""};
  auto in_ns = [&](const BlockAddress& a) { return a.tenant == lo.tenant && a.ns == lo.ns; };
  auto b = blocks_.lower_bound(lo);
  auto r = reserved_.lower_bound(lo);
  if ((b != blocks_.end() && in_ns(b->first)) || (r != reserved_.end() && in_ns(r->first))) {
    return StatusCode::kNotEmpty;
  }
  namespaces_.erase(key);
  lock.unlock();
  return DoRemoveNamespace(tenant, ns);
}

Result<Owner> IndexedStore::StatNamespace(std::string_view tenant, std::string_view ns) {
  std::lock_guard lock(mu_);
  auto it = namespaces_.find({std::string(tenant), std::string(ns)});
  if (it == namespaces_.end()) return StatusCode::kNotFound;
  return it->second.owner;
}

std::vector<std::string> IndexedStore::ListNamespaces(std::string_view tenant) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (auto it = namespaces_.lower_bound({std::string(tenant), ""});
       it != namespaces_.end() && it->first.first == tenant; ++it) {
    out.push_back(it->first.second);
  }
  return out;
}

std::vector<std::string> IndexedStore::ListEntries(std::string_view tenant, std::string_view ns) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  BlockAddress lo{std::string(tenant), std::string(ns), ""};
  auto in_ns = [&](const BlockAddress& a) { return a.tenant == lo.tenant && a.ns == lo.ns; };
  for (auto it = blocks_.lower_bound(lo); it != blocks_.end() && in_ns(it->first); ++it) {
    out.push_back(it->first.block);
  }
  for (auto it = reserved_.lower_bound(lo); it != reserved_.end() && in_ns(it->first); ++it) {
    out.push_back(it->first.block + std::string(kPartSuffix));
  }
  return out;
}

// --- Reservations -----------------------------------------------------------------------

IndexedStore::Reservation* IndexedStore::FindLocked(ReservationId id) {
  auto it = reservations_.find(id);
  return it == reservations_.end() ? nullptr : &it->second;
}

Result<ReservationId> IndexedStore::Reserve(const BlockAddress& address, Owner owner) {
  if (!IsValidTenantName(address.tenant) || !IsValidNamespaceName(address.ns) ||
      !IsValidBlockName(address.block)) {
    return StatusCode::kInvalidArgument;
  }
  ReservationInfo info;
  {
    std::lock_guard lock(mu_);
    if (!namespaces_.count({address.tenant, address.ns})) return StatusCode::kNotFound;
    if (blocks_.count(address) || reserved_.count(address)) return StatusCode::kExists;
    info.id = next_reservation_++;
    info.address = address;
    info.owner = owner;
    info.region_id = (epoch_.load() << 32) | ++next_region_seq_;
    info.epoch = epoch_.load();
    info.create_time_ns = NowNs();
    reserved_[address] = info.id;  // claim the address before leaving the lock
    reservations_[info.id] = Reservation{info, {}, 0, 0, false, nullptr};
    CountersLocked(address.tenant).reservations++;
  }
  auto payload = DoReserve(info);
  std::lock_guard lock(mu_);
  if (!payload.ok()) {
    ReleaseReservationLocked(info.id);
    return payload.status();
  }
  reservations_[info.id].payload = std::move(payload.value());
  return info.id;
}

void IndexedStore::ReleaseReservationLocked(ReservationId id) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  CountersLocked(it->second.info.address.tenant).reservations--;
  reserved_.erase(it->second.info.address);
  reservations_.erase(it);
}

StatusCode IndexedStore::SetIdentity(ReservationId id, std::span<const uint8_t> canonical) {
  if (canonical.size() > kMaxIdentityBytes) return StatusCode::kInvalidArgument;
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return StatusCode::kNotFound;
  if (r->sealing) return StatusCode::kBusy;
  r->identity.assign(canonical.begin(), canonical.end());
  return StatusCode::kOk;
}

Result<Bytes> IndexedStore::GetIdentity(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return StatusCode::kNotFound;
  if (r->identity.empty()) return StatusCode::kNotFound;
  return r->identity;
}

Result<size_t> IndexedStore::Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) {
  std::shared_ptr<PendingPayload> payload;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->sealing) return StatusCode::kBusy;
    if (offset + data.size() > options_.max_block_bytes || offset + data.size() < offset) {
      return StatusCode::kTooLarge;
    }
    if (r->info.state == BlockState::kReserved) Transition(r->info.state, BlockState::kWriting);
    r->writes_inflight++;
    payload = r->payload;
  }
  Result<size_t> n = DoWrite(*payload, offset, data);
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (r) {
    r->writes_inflight--;
    if (n.ok()) r->info.size = std::max<uint64_t>(r->info.size, offset + n.value());
  }
  return n;
}

StatusCode IndexedStore::Truncate(ReservationId id, uint64_t size) {
  std::shared_ptr<PendingPayload> payload;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->sealing || r->writes_inflight) return StatusCode::kBusy;
    if (size > options_.max_block_bytes) return StatusCode::kTooLarge;
    payload = r->payload;
    r->writes_inflight++;
  }
  StatusCode s = DoTruncate(*payload, size);
  std::lock_guard lock(mu_);
  if (Reservation* r = FindLocked(id)) {
    r->writes_inflight--;
    if (s == StatusCode::kOk) r->info.size = size;
  }
  return s;
}

StatusCode IndexedStore::OpenWriter(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return StatusCode::kNotFound;
  if (r->sealing) return StatusCode::kBusy;
  r->writers++;
  return StatusCode::kOk;
}

void IndexedStore::CloseWriter(ReservationId id) {
  std::lock_guard lock(mu_);
  if (Reservation* r = FindLocked(id); r && r->writers > 0) r->writers--;
}

StatusCode IndexedStore::Commit(ReservationId id) {
  std::shared_ptr<PendingPayload> payload;
  BlockInfo draft;
  {
    std::lock_guard lock(mu_);
    Reservation* r = FindLocked(id);
    if (!r) return StatusCode::kNotFound;
    if (r->sealing || r->writers > 0 || r->writes_inflight > 0) return StatusCode::kBusy;
    auto identity = DecodePhysicalKey(r->identity);
    if (!identity.ok() || AddressOf(identity.value()) != r->info.address) {
      return StatusCode::kInvalidArgument;
    }
    if (r->info.size == 0) return StatusCode::kInvalidArgument;
    if (r->info.size > options_.max_block_bytes) return StatusCode::kTooLarge;
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
  Result<Sealed> sealed = DoSeal(*payload, draft);
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  assert(r && r->sealing);  // nothing else removes a sealing reservation
  if (!sealed.ok()) {
    r->sealing = false;
    return sealed.status();
  }
  Transition(r->info.state, BlockState::kCommitted);
  draft.checksum = "xxh3-128:" + sealed->checksums.digest_hex;
  ReleaseReservationLocked(id);
  CountersLocked(draft.address.tenant).commits++;
  IndexLocked(Record{std::move(draft), std::move(sealed->stored)});
  return StatusCode::kOk;
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
    ReleaseReservationLocked(id);
  }
  if (payload) DoDiscard(*payload);
  return StatusCode::kOk;
}

Result<ReservationInfo> IndexedStore::StatReservation(ReservationId id) {
  std::lock_guard lock(mu_);
  Reservation* r = FindLocked(id);
  if (!r) return StatusCode::kNotFound;
  return r->info;
}

std::optional<ReservationId> IndexedStore::FindReservation(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = reserved_.find(address);
  if (it == reserved_.end()) return std::nullopt;
  return it->second;
}

// --- Committed blocks -------------------------------------------------------------------

void IndexedStore::IndexLocked(Record record) {
  const BlockInfo& info = record.info;
  TenantCounters& c = CountersLocked(info.address.tenant);
  c.blocks++;
  c.bytes += info.size;
  by_logical_.emplace(Xxh128Hex(EncodeLogicalKey(info.identity)), info.address);
  by_parent_.emplace(ParentKey{info.address.tenant, info.address.ns, info.identity.chain[0]},
                     info.address);
  BlockAddress address = info.address;
  blocks_[address] = std::move(record);
}

IndexedStore::Record IndexedStore::UnindexLocked(std::map<BlockAddress, Record>::iterator it) {
  Record record = std::move(it->second);
  const BlockInfo& info = record.info;
  blocks_.erase(it);
  TenantCounters& c = CountersLocked(info.address.tenant);
  c.blocks--;
  c.bytes -= info.size;
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
  return record;
}

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
    return StatusCode::kNotFound;
  }
  c.hits++;
  return it->second.info;
}

Result<std::shared_ptr<BlockReader>> IndexedStore::Open(const BlockAddress& address) {
  Record record;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return StatusCode::kNotFound;
    record = it->second;
  }
  Result<Opened> opened = DoOpen(record.info, record.stored);
  if (!opened.ok()) {
    if (opened.status() == StatusCode::kChecksumMismatch) {
      ReportCorrupt(address, record.info.region_id);
    }
    return opened.status();
  }
  return std::shared_ptr<BlockReader>(std::make_shared<VerifyingReader>(
      *this, std::move(record.info), std::move(opened->source), std::move(opened->checksums)));
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
  LookupResult miss;
  if (by_logical_.count(Xxh128Hex(EncodeLogicalKey(identity)))) {
    miss.reason = MissReason::kIncompatible;
  }
  return miss;
}

StatusCode IndexedStore::Invalidate(const BlockAddress& address) {
  Record record;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return StatusCode::kNotFound;
    record = UnindexLocked(it);
  }
  DoDrop(record.info, record.stored);
  return StatusCode::kOk;
}

void IndexedStore::ReportCorrupt(const BlockAddress& address, uint64_t region_id) {
  Record record;
  RemovalObserver observer;
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(address);
    // Already gone: another read (the kernel retries a failed page) found it first. One
    // corrupt block counts once.
    if (it == blocks_.end() || it->second.info.region_id != region_id) return;
    CountersLocked(address.tenant).checksum_failures++;
    record = UnindexLocked(it);
    observer = observer_;
  }
  DoDrop(record.info, record.stored);
  if (observer) observer(address);
}

uint64_t IndexedStore::Epoch() { return epoch_.load(); }

StoreStats IndexedStore::Stats() {
  std::lock_guard lock(mu_);
  return StoreStats{epoch_.load(), counters_};
}

void IndexedStore::SetRemovalObserver(RemovalObserver observer) {
  std::lock_guard lock(mu_);
  observer_ = std::move(observer);
}

TenantCounters& IndexedStore::CountersLocked(const std::string& tenant) { return counters_[tenant]; }

void IndexedStore::RestoreNamespace(const std::string& tenant, const std::string& ns, Owner owner) {
  std::lock_guard lock(mu_);
  namespaces_[{tenant, ns}] = Namespace{owner};
}

void IndexedStore::RestoreBlock(BlockInfo info, std::shared_ptr<StoredPayload> stored) {
  std::lock_guard lock(mu_);
  namespaces_.try_emplace({info.address.tenant, info.address.ns}, Namespace{info.owner});
  IndexLocked(Record{std::move(info), std::move(stored)});
}

void IndexedStore::SetEpoch(uint64_t epoch) { epoch_.store(epoch); }

std::shared_ptr<IndexedStore::StoredPayload> IndexedStore::StoredFor(const BlockAddress& address) {
  std::lock_guard lock(mu_);
  auto it = blocks_.find(address);
  return it == blocks_.end() ? nullptr : it->second.stored;
}

}  // namespace gpucache
