// IndexedStore: the part of the store contract that does not depend on where bytes live.
//
// It owns the in-memory index of namespaces and committed blocks, the reservation table with
// its lifecycle transitions, the lookup rules (exact hit, prefix hit, incompatible miss), the
// commit checks, admission against ResourceLimits, eviction through an EvictionPolicy,
// quarantine, epoch fencing, draining, fill outcomes and the counters. A subclass supplies
// the medium: MemoryStore keeps bytes in memory, FileStore in block files. Medium hooks are
// called without the lock held, so no disk I/O ever happens under it.
//
// Thread safety: all public methods are safe to call concurrently; one mutex guards the index
// (fence_mu_ additionally serializes epoch bumps, taken before mu_).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "store/block_store.h"
#include "store/checksum.h"
#include "store/eviction/eviction_policy.h"

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

class IndexedStore : public BlockStore {
 public:
  // REQUIRES: MakePolicy(options.eviction_policy) is not null (callers validate the name).
  explicit IndexedStore(StoreOptions options);
  ~IndexedStore() override;

  StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) override;
  StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) override;
  Result<Owner> StatNamespace(std::string_view tenant, std::string_view ns) override;
  std::vector<std::string> ListNamespaces(std::string_view tenant) override;
  std::vector<std::string> ListEntries(std::string_view tenant, std::string_view ns) override;

  Result<ReservationId> Reserve(const BlockAddress& address, Owner owner) override;
  StatusCode SetIdentity(ReservationId id, std::span<const uint8_t> canonical) override;
  Result<Bytes> GetIdentity(ReservationId id) override;
  Result<size_t> Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) override;
  // Sets the size of a reservation's payload (truncate of a `.part`).
  StatusCode Truncate(ReservationId id, uint64_t size);
  StatusCode OpenWriter(ReservationId id) override;
  void CloseWriter(ReservationId id) override;
  StatusCode Commit(ReservationId id) override;
  StatusCode Abort(ReservationId id) override;
  Result<ReservationInfo> StatReservation(ReservationId id) override;
  std::optional<ReservationId> FindReservation(const BlockAddress& address) override;

  Result<BlockInfo> Stat(const BlockAddress& address) override;
  // Stat that counts: a hit or a miss for the block's tenant (a path probe by an engine).
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

  void SetRemovalObserver(RemovalObserver observer);
  // REQUIRES: called before the store is shared between threads (start-up wiring).
  void SetCommitObserver(CommitObserver observer) { commit_observer_ = std::move(observer); }
  const StoreOptions& options() const { return options_; }

  // Called by readers: the bytes of `address` (at `region_id`) failed their checksums. If the
  // block is still that region: drops it, counts one failure, tells the observer.
  void ReportCorrupt(const BlockAddress& address, uint64_t region_id);
  // Called by readers when they close.
  void ReaderClosed(const BlockAddress& address, uint64_t region_id);

  // --- Types a medium (subclass) implements; public so media may define them privately.
  // Medium-owned state of an in-flight reservation (a temp file, a buffer).
  class PendingPayload {
   public:
    virtual ~PendingPayload() = default;
  };
  // Medium-owned state of a committed or quarantined block, if any.
  class StoredPayload {
   public:
    virtual ~StoredPayload() = default;
  };
  // Raw, unverified bytes of a committed payload; the reader verifies them.
  class RawSource {
   public:
    virtual ~RawSource() = default;
    // Fills `out` from payload offset `offset`; kIoError on a short or failed read.
    virtual StatusCode ReadRaw(uint64_t offset, std::span<uint8_t> out) = 0;
  };
  struct Sealed {
    PayloadChecksums checksums;
    std::shared_ptr<StoredPayload> stored;
  };
  struct Opened {
    std::unique_ptr<RawSource> source;
    PayloadChecksums checksums;
  };

 protected:
  virtual StatusCode DoCreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) = 0;
  virtual StatusCode DoRemoveNamespace(std::string_view tenant, std::string_view ns) = 0;
  virtual Result<std::shared_ptr<PendingPayload>> DoReserve(const ReservationInfo& info) = 0;
  virtual Result<size_t> DoWrite(PendingPayload& p, uint64_t offset, std::span<const uint8_t> data) = 0;
  virtual StatusCode DoTruncate(PendingPayload& p, uint64_t size) = 0;
  // Computes checksums over the `size` payload bytes, persists, and publishes at the address.
  // `draft` holds every field but the checksum.
  virtual Result<Sealed> DoSeal(PendingPayload& p, const BlockInfo& draft) = 0;
  virtual void DoDiscard(PendingPayload& p) = 0;
  virtual Result<Opened> DoOpen(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) = 0;
  // Moves a block's bytes out of the namespace but keeps them; returns the new medium state.
  virtual std::shared_ptr<StoredPayload> DoQuarantine(const BlockInfo& info,
                                                      const std::shared_ptr<StoredPayload>& stored) = 0;
  // Frees a block's bytes (committed or quarantined).
  virtual void DoDrop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) = 0;
  virtual StatusCode DoPersistEpoch(uint64_t epoch) = 0;
  virtual void DoPersistPins(const std::vector<BlockAddress>& pinned) = 0;

  // For subclasses restoring state at start-up (before any other call).
  void RestoreNamespace(const std::string& tenant, const std::string& ns, Owner owner);
  void RestoreBlock(BlockInfo info, std::shared_ptr<StoredPayload> stored);
  void RestoreQuarantine(BlockInfo info, std::shared_ptr<StoredPayload> stored);
  void SetEpoch(uint64_t epoch);
  // The medium state of a committed block, or null.
  std::shared_ptr<StoredPayload> StoredFor(const BlockAddress& address);
  // Forgets (without touching their bytes) the committed blocks `lost` selects, as when their
  // device is gone; tells the observer. Returns how many.
  size_t ForgetIf(const std::function<bool(const BlockInfo&, const StoredPayload*)>& lost);
  // Calls `fn` for every committed block, under the store's lock (no I/O in `fn`).
  void ForEachBlock(const std::function<void(const BlockInfo&, const StoredPayload*)>& fn);

 private:
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
  struct Record {
    BlockInfo info;
    std::shared_ptr<StoredPayload> stored;
    int open_readers = 0;
  };
  struct Quarantined {
    BlockInfo info;
    std::shared_ptr<StoredPayload> stored;
    int open_readers = 0;
    std::string reason;
    uint64_t since_epoch = 0;
  };
  struct Namespace {
    Owner owner;
  };
  using NamespaceKey = std::pair<std::string, std::string>;
  // Blocks that can serve as a prefix for each other share tenant, namespace and parent hash.
  using ParentKey = std::tuple<std::string, std::string, Bytes>;
  // Work to finish outside the lock after a block left the namespace.
  struct Departure {
    BlockInfo info;
    std::shared_ptr<StoredPayload> stored;
    bool quarantine = false;  // keep the bytes (open handles), else drop them
  };

  // indexed_store.cc
  Reservation* FindLocked(ReservationId id);
  void ReleaseReservationLocked(ReservationId id, FillState outcome);
  void ReleaseCreditsLocked(Reservation& r);
  StatusCode AdmitReservationLocked(const std::string& tenant) const;
  StatusCode AdmitBytesLocked(const Reservation& r, uint64_t new_size) const;
  uint64_t MaxBlockBytes(const std::string& tenant) const;
  void RecordOutcomeLocked(const BlockAddress& address, FillState state);
  // indexed_store_blocks.cc
  void IndexLocked(Record record);
  Record UnindexLocked(std::map<BlockAddress, Record>::iterator it);
  std::optional<BlockAddress> ParentOfLocked(const BlockInfo& info);
  std::optional<LookupResult> PrefixHitLocked(const CacheIdentity& want);
  StatusCode MakeRoomLocked(const std::string& tenant, uint64_t need, std::vector<Departure>& out);
  Departure RemoveLocked(std::map<BlockAddress, Record>::iterator it, const char* reason);
  void Finish(std::vector<Departure> departures, std::optional<RemovalReason> notify);
  void PersistPins();
  // indexed_store_ops.cc
  Usage GlobalUsageLocked() const;
  TenantCounters& CountersLocked(const std::string& tenant);

  const StoreOptions options_;
  std::mutex fence_mu_;
  std::mutex mu_;
  std::atomic<uint64_t> epoch_{1};
  bool draining_ = false;
  bool drain_finished_ = false;
  uint64_t next_region_seq_ = 0;
  ReservationId next_reservation_ = 1;
  std::unique_ptr<EvictionPolicy> policy_;
  bool policy_sized_ = false;  // told the capacity (the block count when it first filled)
  std::map<NamespaceKey, Namespace> namespaces_;
  std::map<BlockAddress, Record> blocks_;
  std::unordered_map<PolicyKey, BlockAddress> by_key_;
  std::multimap<std::string, BlockAddress> by_logical_;  // hex digest of GPCL -> blocks
  std::multimap<ParentKey, BlockAddress> by_parent_;     // chain[0] -> blocks
  std::map<ParentKey, BlockAddress> by_tail_;            // last chain hash -> block
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
