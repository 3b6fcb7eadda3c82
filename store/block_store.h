// The store contract: what every block store (MemoryStore, FileStore) promises.
//
// Writers follow the commit protocol: Reserve (exclusive, the single-flight point) ->
// SetIdentity -> Write... -> Commit, or Abort. Readers Stat or Lookup and then Open a
// committed block; every byte a BlockReader returns was checked against the stored checksums
// first. A block that fails its check is dropped from the namespace: the read fails with
// kChecksumMismatch and the next lookup is a clean miss.
//
// Lookup answers hit / prefix-hit / miss-with-reason and never returns payload bytes.
//
// Thread safety: every BlockStore method may be called from any thread concurrently. A
// BlockReader may be used by several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/identity.h"
#include "store/layout.h"
#include "store/lifecycle.h"
#include "store/status.h"

namespace gpucache {

struct Owner {
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool operator==(const Owner&) const = default;
};

// What a committed block is; returned by Stat and BlockReader::info().
struct BlockInfo {
  BlockAddress address;
  CacheIdentity identity;
  Bytes canonical_identity;  // GPCK bytes, as set through the identity xattr
  uint64_t size = 0;         // payload bytes
  uint64_t commit_epoch = 0;
  uint64_t region_id = 0;
  Owner owner;
  uint64_t commit_time_ns = 0;  // CLOCK_REALTIME at commit
  std::string checksum;         // "xxh3-128:<hex>" of the whole payload
  BlockState state = BlockState::kCommitted;
};

using ReservationId = uint64_t;

// A `.part` file's view of its reservation.
struct ReservationInfo {
  ReservationId id = 0;
  BlockAddress address;
  Owner owner;
  BlockState state = BlockState::kReserved;  // RESERVED or WRITING
  uint64_t size = 0;                         // highest byte written + 1
  uint64_t region_id = 0;
  uint64_t epoch = 0;                        // epoch the reservation was admitted in
  uint64_t create_time_ns = 0;
};

enum class MissReason : uint8_t { kAbsent, kIncompatible, kQuarantined, kFenced };
std::string_view ToString(MissReason reason);

struct LookupResult {
  enum class Kind : uint8_t { kHit, kPrefixHit, kMiss };
  Kind kind = Kind::kMiss;
  MissReason reason = MissReason::kAbsent;  // meaningful for kMiss only
  BlockAddress address;                     // the block to open, for kHit and kPrefixHit
  uint32_t valid_length = 0;                // tokens in that block
};
std::string_view ToString(LookupResult::Kind kind);

struct TenantCounters {
  uint64_t blocks = 0;             // committed blocks now
  uint64_t bytes = 0;              // committed payload bytes now
  uint64_t reservations = 0;       // in flight now
  uint64_t hits = 0;               // exact hits (lookups and opens)
  uint64_t prefix_hits = 0;
  uint64_t misses = 0;
  uint64_t commits = 0;
  uint64_t checksum_failures = 0;
};

struct StoreStats {
  uint64_t epoch = 0;
  std::map<std::string, TenantCounters> tenants;
};

struct StoreOptions {
  uint64_t max_block_bytes = 256ull << 20;  // EFBIG above this
  // Flush payload and header to stable storage before publishing. Off by default: a block
  // lost or torn by a power cut fails its checksums and becomes a clean miss either way.
  bool sync_commits = false;
};

// An open committed block. Reads are verified chunk by chunk before any byte is returned.
class BlockReader {
 public:
  virtual ~BlockReader() = default;
  virtual const BlockInfo& info() const = 0;
  // Reads up to out.size() bytes at `offset` (short at the end of the payload). On a checksum
  // mismatch returns kChecksumMismatch, counts it, and removes the block from the namespace.
  virtual Result<size_t> Read(uint64_t offset, std::span<uint8_t> out) = 0;
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // --- Namespaces: directories that group blocks sharing every byte-affecting field.
  // REQUIRES (all): IsValidTenantName(tenant); names are checked, kInvalidArgument if bad.
  virtual StatusCode CreateNamespace(std::string_view tenant, std::string_view ns, Owner owner) = 0;
  // kNotEmpty while it holds a block or reservation.
  virtual StatusCode RemoveNamespace(std::string_view tenant, std::string_view ns) = 0;
  // Owner of an existing namespace, or kNotFound.
  virtual Result<Owner> StatNamespace(std::string_view tenant, std::string_view ns) = 0;
  virtual std::vector<std::string> ListNamespaces(std::string_view tenant) = 0;
  // Names of committed blocks, then reservations with their ".part" suffix.
  virtual std::vector<std::string> ListEntries(std::string_view tenant, std::string_view ns) = 0;

  // --- Writing: the commit protocol.
  // kNotFound if the namespace does not exist; kExists if the block is committed or already
  // reserved (the single-flight join).
  virtual Result<ReservationId> Reserve(const BlockAddress& address, Owner owner) = 0;
  // Stores the canonical identity bytes; they are checked at Commit, not here, so a bad
  // identity fails the commit (and changes nothing).
  virtual StatusCode SetIdentity(ReservationId id, std::span<const uint8_t> canonical) = 0;
  virtual Result<Bytes> GetIdentity(ReservationId id) = 0;
  virtual Result<size_t> Write(ReservationId id, uint64_t offset, std::span<const uint8_t> data) = 0;
  // A writer holds the reservation open; Commit refuses with kBusy until every writer is done.
  virtual StatusCode OpenWriter(ReservationId id) = 0;
  virtual void CloseWriter(ReservationId id) = 0;
  // Validates identity (decodes, matches the address and tenant), size and writers; computes
  // checksums; makes the block durable enough to be verified after a restart; publishes it.
  // On kInvalidArgument, kTooLarge or kBusy the reservation is kept so the writer can fix it.
  virtual StatusCode Commit(ReservationId id) = 0;
  virtual StatusCode Abort(ReservationId id) = 0;
  virtual Result<ReservationInfo> StatReservation(ReservationId id) = 0;
  virtual std::optional<ReservationId> FindReservation(const BlockAddress& address) = 0;

  // --- Reading.
  virtual Result<BlockInfo> Stat(const BlockAddress& address) = 0;
  virtual Result<std::shared_ptr<BlockReader>> Open(const BlockAddress& address) = 0;
  virtual LookupResult Lookup(const CacheIdentity& identity) = 0;
  // Explicit client invalidation (unlink of a committed block).
  virtual StatusCode Invalidate(const BlockAddress& address) = 0;

  virtual uint64_t Epoch() = 0;
  virtual StoreStats Stats() = 0;
};

}  // namespace gpucache
