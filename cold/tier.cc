#include "cold/tier.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "store/layout.h"

namespace gpucache::cold {
namespace {

// A refill whose block is now in the hot tier (committed now, or already there).
bool Committed(const RefillResult& r) {
  return r.outcome.status == RefillStatus::kHit &&
         (r.commit == StatusCode::kOk || r.commit == StatusCode::kExists);
}

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
      sink_(objects_, options_.prefix, options_.sink, locator_locks_, options_.retention_ns),
      refiller_(objects_, options_.prefix, options_.retired_tenants, keys_,
                options_.accept_unsealed),
      known_(options_.known_places),
      invalidated_(options_.max_queued_commits),
      ops_(objects_, options_.prefix, options_.retired_tenants, keys_, locator_locks_),
      async_(options_.refill_workers, options_.max_refill_ops) {
  sink_.SetUploadedHook([this](const PackedPair& p) { OnUploaded(p); });
  sink_.SetSealKeys(keys_);
}

ColdTier::~ColdTier() {
  // Stop first: a running pack or refill then has its requests aborted and starts nothing
  // more, so waiting for it is short; the ops use the members below, which outlive the wait.
  Stop();
  async_.Shutdown();
}

void ColdTier::Start() {
  MutexLock lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void ColdTier::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  sink_.Stop();  // first: a job whose request the hook aborts goes back to the queue, not failed
  if (abort_requests_) abort_requests_();
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ColdTier::Stopping() const {
  MutexLock lock(mu_);
  return stop_;
}

void ColdTier::OnCommitted(const BlockAddress& address) {
  if (options_.write_back != WriteBack::kAfterCommit) return;
  if (options_.retired_tenants.count(address.tenant)) return;
  MutexLock lock(mu_);
  if (queued_.size() >= options_.max_queued_commits) {
    overflow_++;  // left for a backfill (gpucachectl cold pack)
    return;
  }
  queued_.push_back(address);
}

void ColdTier::OnInvalidated(const BlockAddress& address, const std::string& checksum) {
  std::optional<PayloadXxh128> c = ChecksumFromText(checksum);
  known_.Forget(address);
  if (c) invalidated_.Add(address, *c);
}

void ColdTier::WithdrawInvalidated() {
  for (const PendingInvalidations::Entry& e : invalidated_.Snapshot()) {
    if (Stopping()) return;
    // Committed again with the very bytes it was invalidated with: the engine says they are
    // right after all, and the locator naming them is the cold copy of the block as it is.
    Result<BlockInfo> info = store_.Stat(e.first);
    if (info.ok() && ChecksumFromText(info.value().checksum) == e.second) {
      invalidated_.Remove(e);
      continue;
    }
    // A job this sink holds may still write the block's locator (a backoff, the failed queue):
    // the entry stays, refusing refills, until that job is gone (review, 2026-12-07: it was
    // dropped, and the job's locator then served the invalidated bytes). Asked first: once no
    // job holds the block, none of this node writes its locator again.
    if (sink_.HoldsBlock(e.first)) continue;
    ObjectResult<bool> deleted = ops_.WithdrawLocator(e.first, e.second);
    if (!deleted.ok()) {
      // The next round tries again; an object store that is down would cost every entry its
      // timeouts, holding up the packs and the drain behind this loop (review, 2026-12-07).
      if (deleted.error().kind == ObjectErrorKind::kTemporary) return;
      continue;
    }
    if (deleted.value()) withdrawn_++;
    invalidated_.Remove(e);
    known_.Forget(e.first);  // a refill that raced the invalidation may have learned it again
  }
}

bool ColdTier::ForgetIfInvalidated(const LocatedBlock& known) {
  if (!invalidated_.Refuses(known.outcome.address, known.range.checksum)) return false;
  known_.Forget(known.outcome.address);  // the locator decides, and may name newer bytes
  return true;
}

bool ColdTier::ServesInvalidated(const LocatedBlock& b, RefillResult& r) const {
  if (!invalidated_.Refuses(b.outcome.address, b.range.checksum)) return false;
  r.outcome = RefillOutcome{};
  r.outcome.status = RefillStatus::kMissing;
  r.outcome.reason = MissingReason::kInvalidated;
  r.outcome.address = b.outcome.address;
  r.outcome.detail = "the engine on this node invalidated those bytes; their locator is being withdrawn";
  return true;
}

void ColdTier::Run() {
  MutexLock lock(mu_);
  while (!stop_) {
    wake_.wait_for(mu_, std::chrono::milliseconds(options_.flush_interval_ms));
    if (stop_) break;
    lock.Unlock();
    // Once stopping each returns soon: PackQueued looks at no other block, a round takes no
    // other job (Sink::Stop). Withdrawals first: a commit of other bytes since is packed after.
    WithdrawInvalidated();
    PackQueued();
    sink_.Redrive();  // heals what an outage that has ended left in the failed queue
    // A running pack uploads everything the sink holds and reports it: a round here could take
    // its jobs, and their uploads would be missing from that pack's report.
    if (pack_mu_.TryLock()) {
      DrainReport round = sink_.DrainRound();
      pack_mu_.Unlock();
      if (drained_) drained_(round);
    }
    lock.Lock();
  }
}

// Packs the queued commits that are still committed (evicted or invalidated ones are gone).
void ColdTier::PackQueued() {
  std::deque<BlockAddress> batch;
  {
    MutexLock lock(mu_);
    batch.swap(queued_);
  }
  // A pack holds one tenant's blocks (as ColdOps::Backfill's): each tenant's commits in the
  // order they came.
  std::stable_sort(batch.begin(), batch.end(),
                   [](const BlockAddress& x, const BlockAddress& y) { return x.tenant < y.tenant; });
  PackBuilder builder(options_.prefix, keys_->Get());
  builder.Reserve(options_.pack.target_bytes);
  std::string builder_tenant;
  auto flush = [&] {
    if (builder.count() == 0) return;
    size_t n = builder.count();
    if (sink_.Submit(builder.Build(NowUnixNs())).admission == Admission::kAccepted) packed_ += n;
    builder.Reserve(options_.pack.target_bytes);
  };
  for (const BlockAddress& a : batch) {
    if (Stopping()) return;  // the rest is lost with the daemon, as after a crash
    if (KnownCold(a)) continue;
    if (a.tenant != builder_tenant) {
      flush();
      builder_tenant = a.tenant;
    }
    if (ColdOps::AddBlock(store_, a, builder) != StatusCode::kOk) continue;
    if (builder.payload_bytes() >= options_.pack.target_bytes ||
        builder.count() >= options_.pack.max_blocks) {
      flush();
    }
  }
  flush();
}

// Whether this node knows a place in the object store for the very block committed at `a` (the
// same identity and the same payload): a block it just refilled, or one it already wrote back.
// Such a commit is not packed again. A block invalidated and committed again with other bytes
// under the same identity is packed: its known place holds the bytes it replaced, which a
// refill after its eviction would otherwise bring back. (A place made stale by another node's
// reclaim is not noticed here; the next `gpucachectl cold pack`, which lists locators, packs the
// block again.)
bool ColdTier::KnownCold(const BlockAddress& a) {
  std::optional<KnownPlace> place = known_.Find(a);
  if (!place) return false;
  // Stat reads the identity and checksum from the block's header without opening it as a
  // client would: asking is not a use of the block (nor a miss if it left), so it leaves
  // eviction alone.
  Result<BlockInfo> info = store_.Stat(a);
  return info.ok() && ComputeSha256(info.value().canonical_identity) == place->range.identity_digest &&
         ChecksumFromText(info.value().checksum) == place->range.checksum;
}

// A pack this node uploaded, everything it names now visible (its retention record too: a
// step of the sink's job, before the manifest): each block's place, values this node computed
// itself (so a refill of them is one range GET).
void ColdTier::OnUploaded(const PackedPair& p) {
  for (const ManifestEntry& e : p.decoded.entries) {
    if (invalidated_.Refuses(e.address, e.checksum)) continue;  // invalidated while it went up
    known_.Remember(e.address, {{p.decoded.object_digest, e.offset, e.length, e.checksum, e.identity_digest},
                                p.manifest_digest});
  }
}

ReclaimReport ColdTier::Reclaim(const Sha256& manifest, uint64_t now, const Principal& who) {
  // Refused while this node's sink holds the manifest's job: its remaining steps would write
  // locators (and the manifest) naming objects the reclaim deleted. Once the sink no longer
  // holds it, nothing of this node writes them again (an uploaded or dropped job is gone).
  // Known places are forgotten once the reclaim is allowed (a refused one, a stranger's,
  // changes nothing here), before its first delete, and again after: a refill that raced it
  // may have learned one again.
  // A pack of the same object (the same blocks, packed again once the reclaim deleted their
  // locators) is refused by the sink from here until the reclaim ends (Sink::BeginReclaim).
  bool allowed = false;
  std::string reclaiming;
  ReclaimReport r = ops_.Reclaim(manifest, now, who, [&](const std::string& object_key) -> std::string {
    if (sink_.Holds(ManifestKey(options_.prefix, manifest))) {
      return "its upload is still in progress on this node (pending, in flight or failed: "
             "cold drain, or cold drop the job)";
    }
    if (!sink_.BeginReclaim(object_key)) {
      return "a pack of the same object is being uploaded on this node (pending, in flight or "
             "failed: cold drain, or cold drop the job)";
    }
    reclaiming = object_key;
    allowed = true;
    known_.ForgetManifest(manifest);
    return "";
  });
  if (!reclaiming.empty()) sink_.EndReclaim(reclaiming);
  if (allowed) known_.ForgetManifest(manifest);
  return r;
}

PurgeReport ColdTier::PurgeTenant(const std::string& tenant, size_t max_manifests, uint64_t now) {
  known_.ForgetTenant(tenant);
  return ops_.PurgeTenant(tenant, max_manifests, now);
}

SweepReport ColdTier::SweepOrphans(uint64_t now, uint64_t min_age, size_t max_deletes) {
  // Ages are the object store's LastModified, so `now` is its clock too, read by writing an
  // object and asking when it was written: a node whose clock ran ahead took uploads in flight
  // for old ones (review, 2026-12-07). The earlier of the two clocks is taken.
  const std::string probe = options_.prefix + "sweep-clock";
  ObjectResult<Done> put = objects_.Put(probe, {});
  ObjectResult<ObjectMeta> head = put.ok() ? objects_.Head(probe) : ObjectResult<ObjectMeta>(put.error());
  if (!head.ok() || head.value().modified_unix_s == 0) {
    SweepReport r;
    r.error = head.ok() ? ObjectError{ObjectErrorKind::kPermanent, 0, "NoLastModified",
                                      "the object store gives no Last-Modified: ages are unknown"}
                        : head.error();
    r.error->message = "cannot read the object store's clock (" + probe + "): " + r.error->message;
    return r;
  }
  objects_.Delete(probe);
  now = std::min(now, head.value().modified_unix_s);
  return ops_.SweepOrphans(
      now, min_age, max_deletes,
      [this](const std::string& object_key) -> std::string {
        if (sink_.BeginReclaim(object_key)) return "";
        return "a job of this node is uploading it (pending, in flight or failed: cold drain, "
               "or cold drop the job)";
      },
      [this](const std::string& object_key) { sink_.EndReclaim(object_key); });
}

BackfillReport ColdTier::Pack(const std::string& tenant, uint64_t byte_budget,
                              const std::function<void(const BackfillReport&)>& progress,
                              DrainReport* drained) {
  MutexLock one_at_a_time(pack_mu_);
  // A locator naming invalidated bytes would have the backfill take the block for cold.
  WithdrawInvalidated();
  // Blocks count as packed once the sink accepted their pack (a refused pack's blocks stay for
  // the next backfill); added as each pack is accepted, the last one after the backfill.
  uint64_t counted = 0;
  auto count_packed = [&](const BackfillReport& b) {
    packed_ += b.packed_blocks - counted;
    counted = b.packed_blocks;
  };
  DrainReport streamed;
  // Streams: the sink's workers upload each pack while the backfill reads the next one, and
  // the backfill waits for room instead of refusing a pack while they make progress.
  std::atomic<bool> reading{true};
  std::thread drainer([&] { streamed = sink_.DrainWhile([&] { return reading.load(); }); });
  PackOptions pack = options_.pack;
  pack.wait_for_room_ms = 60'000;
  BackfillReport r = ops_.Backfill(
      store_, sink_, tenant, byte_budget, pack,
      [&](const BackfillReport& b) {
        count_packed(b);
        if (progress) progress(b);
      },
      [this] { return Stopping(); });
  count_packed(r);
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
  const uint64_t budget = std::min(byte_budget, options_.refill_budget_bytes);
  RefillResult r;
  LocatedBlock known = refiller_.LocateKnown(who, identity, budget, known_);
  bool refused = known.outcome.status != RefillStatus::kHit && known.outcome.status != RefillStatus::kMissing;
  if (refused) {
    r.outcome = std::move(known.outcome);
  } else if (!known.ready() || ForgetIfInvalidated(known) || !RefillKnown(known, identity, owner, r)) {
    LocatedBlock block = refiller_.Locate(who, identity, budget);
    if (block.ready()) {
      r = Download(block, identity, owner);
      // The sealed locator's place, verified by the bytes it named: the next refill is one GET.
      // Never an unsealed one's (accept_unsealed): a place is only what a seal vouched for.
      if (Committed(r) && block.sealed) known_.Remember(block.outcome.address, {block.range, block.manifest});
    } else {
      r.outcome = std::move(block.outcome);
    }
  }
  switch (r.outcome.status) {
    case RefillStatus::kHit:
      // A hit is a block the caller now finds hot; one the hot tier refused is answered EIO.
      if (!Committed(r)) {
        commit_failed_++;
        break;
      }
      hits_++;
      if (r.commit == StatusCode::kOk && refilled_) refilled_(r.outcome.address);
      break;
    case RefillStatus::kMissing: missing_[static_cast<size_t>(r.outcome.reason)]++; break;
    default: refused_++; break;
  }
  return r;
}

bool ColdTier::RefillKnown(const LocatedBlock& known, std::span<const uint8_t> identity, Owner owner,
                           RefillResult& r) {
  r = Download(known, identity, owner);
  if (r.outcome.status == RefillStatus::kHit) {
    // The place served the bytes; a hot tier that refused them would refuse the locator's too.
    if (Committed(r)) known_hits_++;
    return true;
  }
  // Absent (reclaimed, perhaps by another node), short, damaged or unreachable: the place is
  // not trusted again; the locator decides, exactly as on a node that never knew it.
  known_fallbacks_++;
  known_.Forget(known.outcome.address);
  return false;
}

// Streams the payload into a hot-tier reservation as it downloads, so writing it overlaps the
// transfer, and commits it only once every byte matched the checksum the sealed locator (or
// this node's known place) gives; else the reservation is aborted: nothing unverified is ever
// committed or served. When no reservation can be taken (the block is hot already or being
// filled, a limit), the payload is downloaded into memory and committed as before, so the
// answers stay the same.
RefillResult ColdTier::Download(const LocatedBlock& block, std::span<const uint8_t> identity, Owner owner) {
  RefillResult r;
  if (ServesInvalidated(block, r)) return r;  // the locator still names what the engine invalidated
  Result<ReservationId> rid = BeginRefill(store_, owner, identity);
  // Committed already: the caller finds the block hot, and nothing is fetched (review,
  // 2026-12-07: a refill of a hot block downloaded its whole payload to learn that).
  if (!rid.ok() && rid.status() == StatusCode::kExists && store_.StatAttributes(block.outcome.address).ok()) {
    r.outcome = block.outcome;
    r.commit = StatusCode::kExists;
    return r;
  }
  if (!rid.ok()) {
    r.outcome = refiller_.Buffer(block);
    if (r.outcome.status == RefillStatus::kHit) r.commit = CommitFollowing(r.outcome, identity, owner);
    r.outcome.payload = {};
    return r;
  }
  // Invalidated since the look above (the engine's unlink came in between): these bytes must
  // not be committed again, or the round would take them for the engine's own.
  if (ServesInvalidated(block, r)) {
    FinishRefill(store_, rid.value(), /*verified=*/false);
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
  // The hot tier refused a piece: answered as a failed commit (EIO), not as the transfer the
  // refusal cut short (which would read "corrupt"); counted in refill_commit_failed.
  if (write != StatusCode::kOk) {
    r.outcome.status = RefillStatus::kHit;
    r.outcome.reason = MissingReason::kNone;
    r.commit = write;
  }
  return r;
}

// kExists says "already hot" only of a committed block. A fill in flight (a writer's .part,
// another refill: two engines asking for one shared prefix) is followed as a single-flight
// follower would: already hot once it commits; if it ends without committing, the verified bytes
// this refill holds are committed instead; kBusy if it is still in flight after follow_fill_ms.
StatusCode ColdTier::CommitFollowing(const RefillOutcome& outcome, std::span<const uint8_t> identity,
                                     Owner owner) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.follow_fill_ms);
  for (;;) {
    StatusCode s = CommitRefill(store_, owner, identity, outcome.payload);
    if (s != StatusCode::kExists || store_.StatAttributes(outcome.address).ok()) return s;
    if (std::chrono::steady_clock::now() >= until) return StatusCode::kBusy;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

ColdTierStats ColdTier::Stats() const {
  ColdTierStats s;
  s.sink = sink_.Stats();
  s.requests = objects_.requests();
  {
    MutexLock lock(mu_);
    s.queued = queued_.size();
  }
  s.queue_overflow = overflow_;
  s.packed_blocks = packed_;
  s.refills = refills_;
  s.refill_hits = hits_;
  for (size_t i = 0; i < kMissingReasonCount; i++) {
    s.refill_missing_by_reason[i] = missing_[i];
    s.refill_missing += s.refill_missing_by_reason[i];
  }
  s.refill_refused = refused_;
  s.refill_commit_failed = commit_failed_;
  s.seal_refusals = refiller_.seal_refusals();
  s.refill_known = known_hits_;
  s.refill_known_fallbacks = known_fallbacks_;
  s.known_places = known_.size();
  s.invalidations_pending = invalidated_.size();
  s.invalidations_overflow = invalidated_.overflow();
  s.locators_withdrawn = withdrawn_;
  return s;
}

}  // namespace gpucache::cold
