#include "cold/tier.h"

#include <chrono>
#include <thread>

#include "store/layout.h"

namespace gpucache::cold {
namespace {

uint64_t NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ColdTier::ColdTier(BlockStore& store, ObjectStore& objects, ColdTierOptions options,
                   std::shared_ptr<SealKeys> keys)
    : store_(store),
      objects_(objects),
      options_(std::move(options)),
      keys_(std::move(keys)),
      locator_locks_(std::make_shared<LocatorLocks>()),
      sink_(objects_, options_.prefix, options_.sink, locator_locks_),
      refiller_(objects_, options_.prefix, options_.retired_tenants, keys_,
                options_.accept_unsealed),
      ops_(objects_, options_.prefix, options_.retired_tenants, keys_, locator_locks_),
      async_(options_.refill_workers, options_.max_refill_ops) {
  if (options_.retention_ns > 0) {
    sink_.SetUploadedHook([this](const PackedPair& p) { RecordRetention(p.manifest_digest); });
  }
}

ColdTier::~ColdTier() {
  async_.Shutdown();  // a running refill uses the members below: let it finish first
  Stop();
}

void ColdTier::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void ColdTier::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ColdTier::OnCommitted(const BlockAddress& address) {
  if (options_.write_back != WriteBack::kAfterCommit) return;
  if (options_.retired_tenants.count(address.tenant)) return;
  std::lock_guard lock(mu_);
  if (queued_.size() >= options_.max_queued_commits) {
    overflow_++;  // left for a backfill (gpucachectl cold pack)
    return;
  }
  queued_.push_back(address);
}

void ColdTier::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms));
    if (stop_) break;
    lock.unlock();
    PackQueued();
    sink_.Redrive();  // heals what an outage that has ended left in the failed queue
    // A running pack uploads everything the sink holds and reports it: a round here could take
    // its jobs, and their uploads would be missing from that pack's report.
    if (pack_mu_.try_lock()) {
      sink_.DrainRound();
      pack_mu_.unlock();
    }
    lock.lock();
  }
}

// Packs the queued commits that are still committed (evicted or invalidated ones are gone).
void ColdTier::PackQueued() {
  std::deque<BlockAddress> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(queued_);
  }
  PackBuilder builder(options_.prefix, keys_->Get());
  builder.Reserve(options_.pack.target_bytes);
  auto flush = [&] {
    if (builder.count() == 0) return;
    size_t n = builder.count();
    if (sink_.Submit(builder.Build(NowUnixNs())).admission == Admission::kAccepted) packed_ += n;
    builder.Reserve(options_.pack.target_bytes);
  };
  for (const BlockAddress& a : batch) {
    if (ColdOps::AddBlock(store_, a, builder) != StatusCode::kOk) continue;
    if (builder.payload_bytes() >= options_.pack.target_bytes ||
        builder.count() >= options_.pack.max_blocks) {
      flush();
    }
  }
  flush();
}

void ColdTier::RecordRetention(const Sha256& manifest) {
  ops_.RecordRetention(manifest, NowUnixNs() + options_.retention_ns);
}

BackfillReport ColdTier::Pack(const std::string& tenant, uint64_t byte_budget,
                              const std::function<void(const BackfillReport&)>& progress,
                              DrainReport* drained) {
  std::lock_guard one_at_a_time(pack_mu_);
  DrainReport streamed;
  // Streams: the sink's workers upload each pack while the backfill reads the next one, and
  // the backfill waits for room instead of refusing a pack while they make progress.
  std::atomic<bool> reading{true};
  std::thread drainer([&] { streamed = sink_.DrainWhile([&] { return reading.load(); }); });
  PackOptions pack = options_.pack;
  pack.wait_for_room_ms = 60'000;
  BackfillReport r = ops_.Backfill(store_, sink_, tenant, byte_budget, pack, [&](const BackfillReport& b) {
    packed_++;
    if (progress) progress(b);
  });
  reading = false;
  drainer.join();
  Accumulate(streamed, sink_.Drain());
  if (drained) *drained = streamed;
  return r;
}

DrainReport ColdTier::DrainNow() { return sink_.Drain(); }

RefillResult ColdTier::Refill(const Principal& who, std::span<const uint8_t> identity,
                              uint64_t byte_budget, Owner owner) {
  refills_++;
  RefillResult r;
  LocatedBlock block = refiller_.Locate(who, identity, std::min(byte_budget, options_.refill_budget_bytes));
  if (block.ready()) r = Download(block, identity, owner);
  else r.outcome = std::move(block.outcome);
  switch (r.outcome.status) {
    case RefillStatus::kHit:
      hits_++;
      if (r.commit == StatusCode::kOk && refilled_) refilled_(r.outcome.address);
      break;
    case RefillStatus::kMissing: missing_++; break;
    default: refused_++; break;
  }
  return r;
}

// Streams the payload into a hot-tier reservation as it downloads, so writing it overlaps the
// transfer, and commits it only once every byte matched the checksum the sealed locator gives
// (else the reservation is aborted: nothing unverified is ever committed or served). When no
// reservation can be taken (the block is hot already or being filled, a limit), the payload
// is downloaded into memory and committed as before, so the answers stay the same.
RefillResult ColdTier::Download(const LocatedBlock& block, std::span<const uint8_t> identity, Owner owner) {
  RefillResult r;
  Result<ReservationId> rid = BeginRefill(store_, owner, identity);
  if (!rid.ok()) {
    std::vector<uint8_t> payload;
    payload.reserve(block.range.length);
    r.outcome = refiller_.Stream(block, [&](uint64_t offset, std::span<const uint8_t> bytes) {
      payload.resize(offset);  // a resent request starts again at 0
      payload.insert(payload.end(), bytes.begin(), bytes.end());
      return true;
    });
    if (r.outcome.status == RefillStatus::kHit) r.commit = CommitRefill(store_, owner, identity, payload);
    return r;
  }
  StatusCode write = StatusCode::kOk;
  r.outcome = refiller_.Stream(block, [&](uint64_t offset, std::span<const uint8_t> bytes) {
    Result<size_t> w = store_.Write(rid.value(), offset, bytes);
    if (w.ok() && w.value() == bytes.size()) return true;
    write = w.ok() ? StatusCode::kIoError : w.status();
    return false;
  });
  bool verified = r.outcome.status == RefillStatus::kHit;
  StatusCode finished = FinishRefill(store_, rid.value(), verified);
  if (verified) r.commit = finished;
  if (write != StatusCode::kOk) {  // the hot tier refused a piece: as a failed commit
    r.outcome.status = RefillStatus::kHit;
    r.outcome.reason = MissingReason::kNone;
    r.commit = write;
  }
  return r;
}

ColdTierStats ColdTier::Stats() const {
  ColdTierStats s;
  s.sink = sink_.Stats();
  s.requests = objects_.requests();
  {
    std::lock_guard lock(mu_);
    s.queued = queued_.size();
  }
  s.queue_overflow = overflow_;
  s.packed_blocks = packed_;
  s.refills = refills_;
  s.refill_hits = hits_;
  s.refill_missing = missing_;
  s.refill_refused = refused_;
  s.seal_refusals = refiller_.seal_refusals();
  return s;
}

}  // namespace gpucache::cold
