// ColdTier: the cold tier as the daemon runs it. Owns the sink, the refiller and the
// operations over one object store, and a background thread that packs recently committed
// blocks (write-back "after-commit"), re-drives temporarily failed uploads and drains the sink.
//
// The cold tier is never on the prefill-to-decode path: the commit observer only queues an
// address (bounded; an overflow is counted and left for a backfill), and every object store
// request runs on the background thread, on the refill workers (async_ops()), or on the
// thread of an explicit control request. Every request goes through one counting wrapper, so
// `requests` counts uploads, refills, listings and reclaims alike.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "cold/async_ops.h"
#include "cold/counting_store.h"
#include "cold/invalidations.h"
#include "cold/known_places.h"
#include "cold/object_store.h"
#include "cold/ops.h"
#include "cold/refill.h"
#include "cold/sink.h"
#include "common/cold_options.h"  // ColdTierOptions
#include "store/block_store.h"
#include "store/mutex.h"

namespace gpucache::cold {

struct ColdTierStats {
  SinkStats sink;
  uint64_t requests = 0;         // every object store request of the tier (sink.requests: uploads)
  uint64_t queued = 0;           // commits waiting to be packed
  uint64_t queue_overflow = 0;   // commits not queued (queue full)
  uint64_t packed_blocks = 0;    // blocks in packs the sink accepted (write-back and backfill)
  uint64_t refills = 0;          // refill requests
  uint64_t refill_hits = 0;
  uint64_t refill_missing = 0;   // the sum of refill_missing_by_reason
  std::array<uint64_t, kMissingReasonCount> refill_missing_by_reason{};  // indexed by MissingReason
  uint64_t refill_refused = 0;   // wrong tenant, retired, invalid
  uint64_t refill_commit_failed = 0;  // verified, but the hot tier refused it (a limit): EIO
  uint64_t refill_known = 0;     // hits through a known place: one range GET, no locator
  uint64_t refill_known_fallbacks = 0;  // a known place that failed (then the locator decided)
  uint64_t known_places = 0;     // places remembered now (cold/known_places.h)
  uint64_t invalidations_pending = 0;   // invalidated blocks whose locators are still to go
  uint64_t invalidations_overflow = 0;  // invalidations not noted (the list was full)
  uint64_t locators_withdrawn = 0;      // locators deleted for naming invalidated bytes
  SealRefusals seal_refusals;    // refills refused for their seal (also in refill_missing)
};

struct RefillResult {
  RefillOutcome outcome;
  StatusCode commit = StatusCode::kOk;  // the hot-store commit, on a hit
};

class ColdTier {
 public:
  // `store` and `objects` are borrowed and must outlive the tier. `keys` seal new objects and
  // verify refills (required; the daemon swaps their keyring on a reload).
  ColdTier(BlockStore& store, ObjectStore& objects, ColdTierOptions options,
           std::shared_ptr<SealKeys> keys);
  ~ColdTier();

  // Starts the background thread (write-back and draining). Idempotent; nothing after Stop().
  void Start();
  // Stops the tier for good: no job, pack or block is started after it, the stop hook ends the
  // requests in flight, a running pack or drain returns, and the background thread is joined.
  // What was not uploaded stays queued or failed, lost with the daemon as after a crash; the
  // next backfill packs those blocks again. (systemd's TimeoutStopSec is 30 s, and the hot
  // store writes its INDEX only after the tier stopped.) The destructor calls it.
  void Stop();
  // Run by Stop() once nothing new starts and before it waits for what runs: ends the object
  // store's requests in flight (the daemon's: S3Client::AbortTransfers); without it Stop waits
  // for them. The store is borrowed, so its owner says how. REQUIRES: set before Start().
  void SetStopHook(std::function<void()> abort_requests) { abort_requests_ = std::move(abort_requests); }

  // The store's commit observer: queues the address for write-back. Cheap, never blocks on I/O.
  void OnCommitted(const BlockAddress& address);

  // Packs committed blocks without a locator (all tenants, or one) up to `byte_budget`,
  // uploading each pack while the next is read (a drainer thread runs beside the backfill),
  // then drains the sink. `progress` sees each block enqueued.
  // `drained` (optional) gets what the drainer uploaded meanwhile, then the final drain.
  // One pack runs at a time (async packs run on workers and could overlap): a second waits.
  BackfillReport Pack(const std::string& tenant, uint64_t byte_budget,
                      const std::function<void(const BackfillReport&)>& progress = {},
                      DrainReport* drained = nullptr);
  DrainReport DrainNow();
  // Packs the commits queued for write-back now and submits them to the sink (the background
  // thread does this every flush_interval). A commit of a block this node knows to be in the
  // object store already (it just refilled it, or wrote it back) is not packed again.
  void PackQueued();
  // A committed block the engine invalidated (store's InvalidationObserver): its known place is
  // forgotten, a refill that would serve those bytes is refused (missing, "invalidated"), and
  // the next round (or pack) deletes the locator naming them. Cheap: on the unlink's thread.
  void OnInvalidated(const BlockAddress& address, const std::string& checksum);
  // Deletes the locators of the invalidated blocks noted so far (ColdOps::WithdrawLocator); one
  // whose block was committed again with the same bytes keeps its locator. An error keeps the
  // entry for the next round. The background round and every pack run it first.
  void WithdrawInvalidated();
  // ColdOps::Reclaim and PurgeTenant, forgetting the known places they may make stale.
  ReclaimReport Reclaim(const Sha256& manifest, uint64_t now_unix_ns, const Principal& who);
  PurgeReport PurgeTenant(const std::string& tenant, size_t max_manifests, uint64_t now_unix_ns);
  // ColdOps::SweepOrphans; an object this node's sink is uploading is never a candidate, and
  // none is packed again on this node while the sweep holds it (Sink::BeginReclaim).
  SweepReport SweepOrphans(uint64_t now_unix_s, uint64_t min_age_s, size_t max_deletes);
  // Fetches a block for an authorized caller and commits it to the hot store as `owner`.
  // `byte_budget` is capped at the configured refill budget. Where this node knows the block's
  // place (cold/known_places.h) that is one range GET; if it fails in any way (absent, short,
  // corrupt, error) the place is forgotten and the refill is the locator's, as without one.
  RefillResult Refill(const Principal& who, std::span<const uint8_t> identity,
                      uint64_t byte_budget, Owner owner);

  // Told (on the refilling thread) of each block a refill committed to the hot store.
  // REQUIRES: set before Start() and before any refill.
  void SetRefilledHook(std::function<void(const BlockAddress&)> hook) { refilled_ = std::move(hook); }
  // Told (on the background thread, one round at a time) what each of its drain rounds did:
  // cold/ logs nothing itself, and an upload that fails there has no caller to answer (the
  // daemon logs it: daemon/cold_upload_log.h). REQUIRES: set before Start().
  void SetDrainedHook(std::function<void(const DrainReport&)> hook) { drained_ = std::move(hook); }

  Sink& sink() { return sink_; }
  AsyncOps& async_ops() { return async_; }
  const ColdOps& ops() const { return ops_; }
  const ColdTierOptions& options() const { return options_; }
  ColdTierStats Stats() const;

 private:
  void Run();
  bool Stopping() const;
  void OnUploaded(const PackedPair& pair);
  bool KnownCold(const BlockAddress& a);
  // Whether `b` would serve bytes this node's engine invalidated (then `r` says so).
  bool ServesInvalidated(const LocatedBlock& b, RefillResult& r) const;
  // The same for a known place, which is then forgotten (the locator decides).
  bool ForgetIfInvalidated(const LocatedBlock& known);
  RefillResult Download(const LocatedBlock& block, std::span<const uint8_t> identity, Owner owner);
  // Commits a verified payload that was downloaded while another fill held the block.
  StatusCode CommitFollowing(const RefillOutcome& outcome, std::span<const uint8_t> identity, Owner owner);
  // Download through a ready known place; false (the place forgotten) when the fetch failed.
  bool RefillKnown(const LocatedBlock& known, std::span<const uint8_t> identity, Owner owner,
                   RefillResult& r);

  BlockStore& store_;
  CountingObjectStore objects_;
  const ColdTierOptions options_;
  const std::shared_ptr<SealKeys> keys_;
  const std::shared_ptr<LocatorLocks> locator_locks_;  // the sink's uploads vs reseal, reclaim
  Sink sink_;
  Refiller refiller_;
  KnownPlaces known_;
  PendingInvalidations invalidated_;
  ColdOps ops_;
  AsyncOps async_;

  mutable Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<BlockAddress> queued_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::function<void(const BlockAddress&)> refilled_;
  std::function<void(const DrainReport&)> drained_;
  std::function<void()> abort_requests_;
  Mutex pack_mu_;  // one backfill at a time: two would read and pack the same blocks
  std::atomic<uint64_t> overflow_{0}, packed_{0}, refills_{0}, hits_{0}, refused_{0},
      commit_failed_{0}, known_hits_{0}, known_fallbacks_{0}, withdrawn_{0};
  // Refills answered Missing, by reason: an S3 outage (kUnavailable) is told from cold misses.
  std::array<std::atomic<uint64_t>, kMissingReasonCount> missing_{};
};

}  // namespace gpucache::cold
