// IndexedStore: the part of the store contract that does not depend on where bytes live.
//
// It owns the in-memory index of namespaces and committed blocks, the reservation table with
// its lifecycle transitions, the lookup rules (exact hit, prefix hit, incompatible miss), the
// commit checks and the counters. A subclass supplies the medium: MemoryStore keeps bytes in
// memory, FileStore in block files. Hooks are called without the lock held, so no disk I/O
// ever happens under it.
//
// Thread safety: all public methods are safe to call concurrently; one mutex guards the index.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "store/block_store.h"
#include "store/checksum.h"

namespace gpucache {

// Called (without any store lock held) when a committed block leaves the namespace for a
// reason the caller of the operation could not see: corruption found on read, for now.
using RemovalObserver = std::function<void(const BlockAddress&)>;

class IndexedStore : public BlockStore {
 public:
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

  uint64_t Epoch() override;
  StoreStats Stats() override;

  // --- Types a medium (subclass) implements; public so media may define them privately.
  // Medium-owned state of an in-flight reservation (a temp file, a buffer).
  class PendingPayload {
   public:
    virtual ~PendingPayload() = default;
  };
  // Medium-owned state of a committed block, if any.
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

  void SetRemovalObserver(RemovalObserver observer);
  const StoreOptions& options() const { return options_; }

  // Called by readers: the bytes of `address` (at `region_id`) failed their checksums. If the
  // block is still that region: drops it, counts one failure, tells the observer.
  void ReportCorrupt(const BlockAddress& address, uint64_t region_id);

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
  virtual void DoDrop(const BlockInfo& info, const std::shared_ptr<StoredPayload>& stored) = 0;

  // For subclasses restoring state at start-up (before any other call).
  void RestoreNamespace(const std::string& tenant, const std::string& ns, Owner owner);
  void RestoreBlock(BlockInfo info, std::shared_ptr<StoredPayload> stored);
  void SetEpoch(uint64_t epoch);
  // The medium state of a committed block, or null.
  std::shared_ptr<StoredPayload> StoredFor(const BlockAddress& address);

 private:
  struct Reservation {
    ReservationInfo info;
    Bytes identity;
    int writers = 0;        // handles that may still write
    int writes_inflight = 0;
    bool sealing = false;   // Commit is running outside the lock
    std::shared_ptr<PendingPayload> payload;
  };
  struct Record {
    BlockInfo info;
    std::shared_ptr<StoredPayload> stored;
  };
  struct Namespace {
    Owner owner;
  };
  using NamespaceKey = std::pair<std::string, std::string>;
  // Blocks that can serve as a prefix for each other share tenant, namespace and parent hash.
  using ParentKey = std::tuple<std::string, std::string, Bytes>;

  Reservation* FindLocked(ReservationId id);
  void IndexLocked(Record record);
  Record UnindexLocked(std::map<BlockAddress, Record>::iterator it);
  std::optional<LookupResult> PrefixHitLocked(const CacheIdentity& want);
  TenantCounters& CountersLocked(const std::string& tenant);
  void ReleaseReservationLocked(ReservationId id);

  const StoreOptions options_;
  std::mutex mu_;
  std::atomic<uint64_t> epoch_{1};
  uint64_t next_region_seq_ = 0;
  ReservationId next_reservation_ = 1;
  std::map<NamespaceKey, Namespace> namespaces_;
  std::map<BlockAddress, Record> blocks_;
  std::multimap<std::string, BlockAddress> by_logical_;  // hex digest of GPCL -> blocks
  std::multimap<ParentKey, BlockAddress> by_parent_;
  std::map<ReservationId, Reservation> reservations_;
  std::map<BlockAddress, ReservationId> reserved_;
  std::map<std::string, TenantCounters> counters_;
  RemovalObserver observer_;

  friend class VerifyingReader;
};

}  // namespace gpucache
