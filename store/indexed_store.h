// IndexedStore: the part of the store contract that does not depend on where bytes live.
//
// It owns the in-memory index of namespaces and committed blocks, the reservation table with
// its lifecycle transitions, the lookup rules (exact hit, prefix hit, incompatible miss), the
// commit checks, admission against ResourceLimits, eviction through an EvictionPolicy,
// quarantine, epoch fencing, draining, fill outcomes and the counters. It holds its medium by
// composition (store/medium.h): MemoryMedium keeps bytes in memory, FileMedium in block files.
// The medium is called without the lock held, so no disk I/O ever happens under it.
//
// The index is sized for millions of blocks: per committed block it keeps a Record of fixed
// size (the block name as 16 binary bytes in its namespace's ordered map, sizes, epoch,
// region, owner, commit time, the payload digest, pin and reader counts, and IndexKeys:
// 64-bit digests of the identity's parts; store/index_keys.h) and one entry in each side
// table (policy key, parent hash, tail hash, logical key). Tenant and namespace strings live
// once, in the namespace table; a record names its namespace by a 32-bit id. The identity
// itself is not kept: Stat reads it back through the medium (DoReadIdentity), Open from the
// header it re-reads anyway, and both check it against IndexKeys::identity. StatAttributes
// and Probe answer from memory alone, with the identity fields left empty.
//
// Thread safety: all public methods are safe to call concurrently; one mutex guards the index
// (fence_mu_ additionally serializes epoch bumps, taken before mu_).
#pragma once

#include <atomic>
#include <bit>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "store/block_index.h"
#include "store/block_store.h"
#include "store/checksum.h"
#include "store/eviction/eviction_policy.h"
#include "store/index_keys.h"
#include "store/medium.h"

namespace gpucache {

// Why a committed block left the namespace behind the kernel's back.
enum class RemovalReason : uint8_t { kEvicted, kCorrupt, kLost };
std::string_view ToString(RemovalReason reason);

// Called (without any store lock held) when a committed block leaves the namespace for a
// reason the kernel could not see: eviction, an admin request, corruption found on read, a
// device taken out of service.
using RemovalObserver = std::function<void(const BlockAddress&, RemovalReason)>;
// Called (without any store lock held, on the committing thread) after a block is published.
// Must be cheap: it delays the writer's commit reply (the cold tier only queues the address).
using CommitObserver = std::function<void(const BlockAddress&)>;

class IndexedStore : public BlockStore, private MediumHost {
 public:
  // REQUIRES: MakePolicy(options.eviction_policy) is not null (callers validate the name).
  IndexedStore(StoreOptions options, std::unique_ptr<Medium> medium);
  // Closes the medium (a clean close: it may save what speeds up the next start).
  ~IndexedStore() override;
  // Restores what the medium holds; false (with a reason) if it cannot. Call once, first.
  bool Load(MediumReport& report, std::string& error);

  StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) override;
  StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) override;
  Result<Owner> StatNamespace(std::string_view tenant, std::string_view ns) override;
  std::vector<std::string> ListNamespaces(std::string_view tenant) override;
  std::vector<std::string> ListEntries(std::string_view tenant, std::string_view ns) override;

  Result<ReservationId> Reserve(const BlockAddress& address, Owner owner) override;
  StatusCode SetIdentity(ReservationId id, std::span<const uint8_t> canonical) override;
  Result<Bytes> GetIdentity(ReservationId id) override;
  Result<size_t> Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) override;
  // Writes `data` at the end of the payload as the store knows it (O_APPEND).
  Result<size_t> Append(ReservationId id, std::span<const uint8_t> data);
  // Sets the size of a reservation's payload (truncate of a `.part`).
  StatusCode Truncate(ReservationId id, uint64_t size);
  StatusCode OpenWriter(ReservationId id) override;
  void CloseWriter(ReservationId id) override;
  StatusCode Commit(ReservationId id) override;
  // After Commit said kInvalidArgument: which of its checks failed, in one line for the log.
  std::string ExplainInvalidCommit(ReservationId id);
  StatusCode Abort(ReservationId id) override;
  Result<ReservationInfo> StatReservation(ReservationId id) override;
  std::optional<ReservationId> FindReservation(const BlockAddress& address) override;

  // The whole BlockInfo; the identity is read back through the medium (for FileStore, the
  // block file's header) and checked. kNotFound if the block is gone or its stored identity
  // no longer matches (then it is dropped as corrupt).
  Result<BlockInfo> Stat(const BlockAddress& address) override;
  // Stat from memory alone: every BlockInfo field but `identity` and `canonical_identity`,
  // which are left empty. What attributes (getattr, lookup) need; no I/O.
  Result<BlockInfo> StatAttributes(const BlockAddress& address);
  // StatAttributes that counts: a hit or a miss for the block's tenant (a path probe).
  Result<BlockInfo> Probe(const BlockAddress& address);
  Result<std::shared_ptr<BlockReader>> Open(const BlockAddress& address) override;
  LookupResult Lookup(const CacheIdentity& identity) override;
  StatusCode Invalidate(const BlockAddress& address) override;

  StatusCode Evict(const BlockAddress& address) override;
  StatusCode SetPinned(const BlockAddress& address, bool pinned) override;
  Result<uint64_t> Fence() override;
  std::vector<QuarantineInfo> ListQuarantine() override;
  Result<QuarantineInfo> StatQuarantine(uint64_t region_id);
  StatusCode ReclaimDrained(uint64_t region_id) override;
  Result<uint64_t> ReclaimFenced(uint64_t epoch) override;
  StatusCode Drain(DrainAction action) override;
  std::optional<FillState> FillOutcome(const BlockAddress& address) override;
  // True while a fill of `address` fenced less than a reservation lease ago is remembered:
  // its writer may still be about to commit, and must hear ESTALE.
  bool RecentlyFenced(const BlockAddress& address, uint64_t now_ns);
  size_t ExpireReservations(uint64_t now_ns) override;

  uint64_t Epoch() override;
  StoreStats Stats() override;
  StatusCode IsolateDomain(const std::string& path) override;
  std::vector<DomainInfo> Domains() override;
  // Where the medium keeps a block's bytes (a block file), for tools and tests.
  std::string BackingPath(const BlockAddress& address) { return medium_->PathOf(address); }
  Medium& medium() { return *medium_; }

  void SetRemovalObserver(RemovalObserver observer);
  // REQUIRES: called before the store is shared between threads (start-up wiring).
  void SetCommitObserver(CommitObserver observer) { commit_observer_ = std::move(observer); }
  const StoreOptions& options() const { return options_; }
  // A live reload (SIGHUP): admission checks use `limits` from now on; fills already admitted
  // go on, and their commits are judged by the new limits.
  void SetLimits(ResourceLimits limits) {
    std::lock_guard lock(mu_);
    options_.limits = std::move(limits);
  }

  // Called by readers: the bytes of `address` (at `region_id`) failed their checksums. If the
  // block is still that region: drops it, counts one failure, tells the observer.
  void ReportCorrupt(const BlockAddress& address, uint64_t region_id);
  // Called by readers when they close.
  void ReaderClosed(const BlockAddress& address, uint64_t region_id);

 private:
  // MediumHost: what the medium calls back (store/medium.h).
  void RestoreNamespace(const std::string& tenant, const std::string& ns, Owner owner) override;
  bool RestoreBlock(BlockInfo info, std::shared_ptr<StoredPayload> stored) override;
  bool RestoreBlock(const IndexedBlock& block, std::shared_ptr<StoredPayload> stored) override;
  void RestoreQuarantine(BlockInfo info, std::shared_ptr<StoredPayload> stored) override;
  void ReserveBlocks(size_t blocks) override;
  void SetEpoch(uint64_t epoch) override;
  std::shared_ptr<StoredPayload> StoredFor(const BlockAddress& address) override;
  size_t ForgetIf(const std::function<bool(const StoredPayload*)>& lost) override;
  void ForEachBlock(const BlockVisitor& visit) override;

  struct Reservation {
    ReservationInfo info;
    Bytes identity;
    int writers = 0;          // handles that may still write
    int writes_inflight = 0;
    bool sealing = false;     // Commit is running outside the lock
    bool fenced = false;      // an epoch bump took it: every further call is kFenced
    uint64_t last_activity_ns = 0;
    std::shared_ptr<PendingPayload> payload;
  };
  using Record = BlockIndex::Record;
  using BlockId = BlockIndex::Id;
  struct Quarantined {
    BlockInfo info;  // the identity fields are not needed (and may be empty)
    std::shared_ptr<StoredPayload> stored;
    int open_readers = 0;
    std::string reason;
    uint64_t since_epoch = 0;
  };
  // Work to finish outside the lock after a block left the namespace.
  struct Departure {
    BlockInfo info;  // without identity
    std::shared_ptr<StoredPayload> stored;
    bool quarantine = false;  // keep the bytes (open handles), else drop them
  };

  // indexed_store.cc
  Reservation* FindLocked(ReservationId id);
  void ReleaseReservationLocked(ReservationId id, FillState outcome);
  void ReleaseCreditsLocked(Reservation& r);
  // Admits one more reservation, evicting a block into `evicted` if registrations must be made.
  StatusCode AdmitReservationLocked(const std::string& tenant, std::vector<Departure>& evicted);
  StatusCode AdmitBytesLocked(const Reservation& r, uint64_t new_size) const;
  uint64_t MaxBlockBytes(const std::string& tenant) const;
  void RecordOutcomeLocked(const BlockAddress& address, FillState state);
  // indexed_store_blocks.cc
  BlockInfo AttributesOfLocked(BlockId id) const;  // without identity
  // Adds a block to the index and the policy, counting it; false if already there.
  bool IndexLocked(const BlockAddress& address, Record record);
  // Takes a block out of the index and the policy, uncounting it.
  Record UnindexLocked(BlockId id);
  std::optional<LookupResult> PrefixHitLocked(const CacheIdentity& want, const BlockAddress& self);
  // What eviction must free, decided whole before any block goes (a refusal changes nothing).
  struct RoomRequest {
    std::string_view tenant;      // whose fill needs the room
    // Amounts are bytes, or registrations (blocks) when `count_blocks`.
    bool count_blocks = false;
    uint64_t own = 0;             // from the tenant's own blocks (its limit): else `own_refusal`
    uint64_t shared = 0;          // from anyone's (global limit, full device): else `shared_refusal`
    uint64_t shares_of = 0;       // what the fair shares are computed over (see FairShareLocked)
    const PendingPayload* device = nullptr;  // only blocks on the device this payload is on
    StatusCode own_refusal = StatusCode::kTenantQuota;
    StatusCode shared_refusal = StatusCode::kNoSpace;
  };
  // Chooses victims for `req` by the eviction policy, then evicts them into `out`.
  StatusCode MakeRoomLocked(const RoomRequest& req, std::vector<Departure>& out);
  // The room a commit of `need` bytes by `tenant` needs under the retained-byte limits.
  StatusCode MakeRoomForCommitLocked(const std::string& tenant, uint64_t need,
                                     std::vector<Departure>& out);
  // A write to `p` met a full device: frees `need` bytes there (plus slack) from blocks that may
  // go, or returns kNoSpace having evicted nothing when they would not suffice.
  StatusCode MakeDeviceRoom(const PendingPayload& p, const std::string& tenant, uint64_t need);
  // The fair share of `total` for each tenant holding bytes (and `tenant`): eviction for one
  // tenant's fill never takes another below it (docs/eviction.md).
  uint64_t FairShareLocked(std::string_view tenant, uint64_t total) const;
  // Room for one more registration (reservation) of `tenant` under max_registrations: evicts
  // one block, its own for its limit, anyone's within fair shares for the global one.
  StatusCode MakeRegistrationRoomLocked(const std::string& tenant, std::vector<Departure>& out);
  Departure RemoveLocked(BlockId id, const char* reason);
  void Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify);
  void PersistPins();
  // indexed_store_ops.cc
  Usage GlobalUsageLocked() const;
  TenantCounters& CountersLocked(const std::string& tenant);

  StoreOptions options_;  // `limits` guarded by mu_ (SetLimits); the rest fixed at construction
  const std::unique_ptr<Medium> medium_;
  std::mutex fence_mu_;
  std::mutex mu_;
  std::atomic<uint64_t> epoch_{1};
  bool draining_ = false;
  bool drain_finished_ = false;
  uint64_t next_region_seq_ = 0;
  ReservationId next_reservation_ = 1;
  std::unique_ptr<EvictionPolicy> policy_;
  bool policy_sized_ = false;  // told the capacity (the block count when it first filled)
  BlockIndex index_;
  std::map<uint64_t, Quarantined> quarantine_;           // by region id
  std::map<ReservationId, Reservation> reservations_;
  std::map<BlockAddress, ReservationId> reserved_;
  struct Outcome {
    FillState state;
    uint64_t since_ns;
  };
  std::map<BlockAddress, Outcome> outcomes_;
  std::deque<BlockAddress> outcome_order_;               // oldest first, for the bound
  std::map<std::string, TenantCounters> counters_;
  RemovalObserver observer_;
  CommitObserver commit_observer_;  // set once at start-up, then read-only

  friend class VerifyingReader;
};

// The policy key of a block address (a 64-bit digest).
PolicyKey PolicyKeyOf(const BlockAddress& address);

}  // namespace gpucache
