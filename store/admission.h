// Admission: what the store admits and what it evicts to make room.
//
// It holds the ResourceLimits (store/limits.h), every tenant's counters and usage, the drain
// switch that refuses new fills, and the eviction policy. Asked for room (a registration, the
// retained bytes of a commit, space on a full device), it decides the victims whole, by the
// policy and the fair shares (docs/eviction.md), before any block goes: a refusal changes
// nothing. It only names the victims; the store takes them out of the index.
//
// It reads the index (store/block_index.h) and asks the medium one memory-only question
// (SharesDevice), and is told by the store of every block indexed, unindexed, used or missed.
//
// Thread safety: none; the store's lock guards every call (GUARDED_BY(mu_) in
// store/indexed_store.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "store/block_index.h"
#include "store/block_store.h"
#include "store/eviction/eviction_policy.h"
#include "store/limits.h"
#include "store/medium.h"

namespace gpucache {

// The key a block is counted by in the eviction policy: a 64-bit digest of its address.
PolicyKey PolicyKeyOf(const BlockAddress& address);

class Admission {
 public:
  using Id = BlockIndex::Id;

  // An unknown policy name means the default policy (callers validate names first).
  Admission(const ResourceLimits& limits, std::string_view policy, const BlockIndex& index,
            const Medium& medium);

  // --- Counters.
  TenantCounters& Counters(const std::string& tenant) { return counters_[tenant]; }
  const std::map<std::string, TenantCounters>& counters() const { return counters_; }
  Usage GlobalUsage() const;

  // --- Fills.
  void SetDraining(bool draining) { draining_ = draining; }
  bool draining() const { return draining_; }
  uint64_t MaxBlockBytes(const std::string& tenant) const;
  // One more descriptor held for `tenant` (a reservation or a block opened for reading):
  // kExhausted past its max_open_files.
  uint64_t MaxOpenFiles(const std::string& tenant) const;
  StatusCode AdmitOpen(const std::string& tenant) const;
  void ReaderOpened(const std::string& tenant) { Counters(tenant).usage.open_readers++; }
  void ReaderClosed(const std::string& tenant) {
    uint64_t& n = Counters(tenant).usage.open_readers;
    if (n > 0) --n;
  }
  // One more reservation of `tenant`: kDraining, kExhausted (in-flight requests), or kOk with
  // the blocks to evict so that its registration fits into `victims`.
  StatusCode AdmitReservation(const std::string& tenant, std::vector<Id>& victims);
  // A reservation of `tenant` growing from `old_size` to `new_size` payload bytes.
  StatusCode AdmitBytes(const std::string& tenant, uint64_t old_size, uint64_t new_size) const;
  // Credits of a reservation: taken at admission, grown by writes, released when it ends.
  void ReservationAdmitted(const std::string& tenant) { Counters(tenant).usage.reservations++; }
  void ReservationResized(const std::string& tenant, uint64_t old_size, uint64_t new_size);
  void ReservationReleased(const std::string& tenant, uint64_t size);

  // --- Room. Each names its victims in `victims` (and counts them as evictions), or refuses
  // having named none.
  // A commit of `need` bytes under the retained-byte limits: kTenantQuota, kNoSpace. The bytes
  // of commits sealing now count as retained, and cannot be evicted.
  // `parent`: the resident block the committing one continues (its chain[0] is that block's
  // last hash), if any. Neither it nor its resident ancestors go for this commit: taken for a
  // childless leaf, the block a chain's next block extends was evicted for it, one commit
  // after another, and a chain longer than a quota kept only its tail, which no prefix lookup
  // reaches (review, 2026-12-07). Past the limit with all of them kept, the commit is refused.
  // `link`: where the block sits in its namespace's chains. A commit whose parent was refused
  // room (the chain's earlier block) is refused too when it needs room: with its parent gone it
  // is reachable by no prefix lookup, and evicting for it took the chain's first blocks.
  static constexpr size_t kRefusedTails = 4096;  // refusals remembered (RoomForCommit)
  struct ChainLink {
    uint32_t ns = 0;
    uint64_t parent = 0;  // IndexKeys::parent, tail
    uint64_t tail = 0;
  };
  StatusCode RoomForCommit(const std::string& tenant, uint64_t need, std::vector<Id>& victims,
                           std::optional<Id> parent = std::nullopt,
                           std::optional<ChainLink> link = std::nullopt);
  // A commit given room is sealing outside the lock, then ended (indexed, failed or fenced):
  // from one to the other its bytes are the tenant's committing_bytes.
  void CommitSealing(const std::string& tenant, uint64_t size) {
    Counters(tenant).usage.committing_bytes += size;
  }
  void CommitEnded(const std::string& tenant, uint64_t size) {
    Counters(tenant).usage.committing_bytes -= size;
  }
  // A write to `device` met a full device with `space` left (nullopt: unknown): `need` bytes
  // plus slack from blocks on that device. kNoSpace when eviction would not answer it.
  StatusCode RoomOnDevice(const PendingPayload& device, std::optional<Medium::DeviceSpace> space,
                          const std::string& tenant, uint64_t need, std::vector<Id>& victims,
                          std::optional<Id> parent = std::nullopt, std::optional<ChainLink> link = std::nullopt);

  // --- What happens to blocks (counts usage, tells the policy).
  // `key`: PolicyKeyOf(its address), what frequency-aware policies count it by.
  void Indexed(Id id, std::optional<Id> parent, bool partial, PolicyKey key);
  // REQUIRES: called before the index forgets `id`.
  void Unindexing(Id id);
  void Quarantined(const std::string& tenant, uint64_t size);
  void Reclaimed(const std::string& tenant, uint64_t size);
  void Used(Id id) { policy_->OnAccess(id); }
  // The index was sized for `blocks` blocks: the policy's per-block arrays too.
  void Reserve(size_t blocks) { policy_->Reserve(blocks); }
  void Missed(PolicyKey key) { policy_->OnMiss(key); }
  // How many times a block was asked whether it may go, since the start: what choosing
  // victims costs (tests check that k victims cost O(k)).
  uint64_t eligibility_checks() const { return eligibility_checks_; }

 private:
  // What eviction must free, decided whole before any block goes.
  struct RoomRequest {
    std::string_view tenant;      // whose fill needs the room
    bool count_blocks = false;    // amounts are registrations (blocks), else bytes
    uint64_t own = 0;             // from the tenant's own blocks (its limit): else `own_refusal`
    uint64_t shared = 0;          // from anyone's (global limit, full device): else `shared_refusal`
    uint64_t shares_of = 0;       // what the fair shares are computed over (see FairShare)
    const PendingPayload* device = nullptr;  // only blocks on the device this payload is on
    StatusCode own_refusal = StatusCode::kTenantQuota;
    StatusCode shared_refusal = StatusCode::kNoSpace;
    const std::vector<Id>* kept = nullptr;  // never victims: the commit's resident ancestors
  };
  // `parent` and the resident blocks its chain continues, nearest first (at most
  // kMaxChainWalk: 4,096 blocks of 256 tokens are a million tokens of context).
  std::vector<Id> AncestorsOf(Id parent) const;
  static constexpr size_t kMaxChainWalk = 4096;
  StatusCode MakeRoom(const RoomRequest& req, std::vector<Id>& victims);
  // MakeRoom keeping the fill's chain: refused at once when its parent was refused room lately
  // (and is not resident), else never taking `parent` or its resident ancestors.
  StatusCode MakeRoomKeepingChain(RoomRequest req, std::vector<Id>& victims, std::optional<Id> parent,
                                  std::optional<ChainLink> link);
  // Chains refused room lately: (namespace, tail) of the last kRefusedTails commits refused.
  bool RefusedParent(const ChainLink& link) const;
  void RefusedRoom(const ChainLink& link);
  void ForgetRefused(const ChainLink& link);
  std::set<std::pair<uint32_t, uint64_t>> refused_tails_;
  std::deque<std::pair<uint32_t, uint64_t>> refused_order_;
  // Blocks indexed before `parent` whose chain continues it (a batch's renames arrive in any
  // order, a restart loads in INDEX order, a parent is recomputed after it was evicted) become
  // its children in the policy, so that it is not taken for a leaf: O(its children).
  void AdoptChildren(Id parent);
  // One MakeRoom's choice: the victims so far and what they free. Asking about a block costs a
  // few lookups and no allocation, as the policy may walk past many refused blocks per pick.
  struct Choice {
    const RoomRequest& req;
    uint64_t share = 0;  // FairShare
    std::vector<Id> ids;
    uint64_t freed_own = 0, freed_shared = 0;
    // Per other tenant met: what it retains (or registers), and what was chosen of it so far.
    struct Held {
      uint64_t held = 0, taken = 0;
    };
    std::map<std::string_view, Held, std::less<>> others;
    // A request for room on one device: what each tenant holds on that device (one pass over
    // the index), which is what its fair share of the device is measured against.
    std::optional<std::map<std::string_view, uint64_t, std::less<>>> on_device;
  };
  // What each tenant holds on `device` (bytes, or blocks if `count_blocks`).
  std::map<std::string_view, uint64_t, std::less<>> HeldOnDevice(const PendingPayload& device,
                                                                bool count_blocks) const;
  Choice::Held& HeldBy(Choice& c, std::string_view owner) const;
  // One more victim for `c` (only the tenant's own blocks if `own_only`); false if none may go.
  bool Pick(Choice& c, bool own_only);
  // Whether block `id` may go for `c`'s request: unpinned, unopened, on the device, and the
  // tenant's own or (unless `own_only`) another's above its fair share.
  bool MayGo(Choice& c, Id id, bool own_only) const;
  uint64_t AmountOf(const RoomRequest& req, Id id) const;
  // The fair share of `total` for each tenant holding blocks (and `tenant`): eviction for one
  // tenant's fill never takes another below it (docs/eviction.md).
  uint64_t FairShare(std::string_view tenant, uint64_t total) const;
  Usage UsageOf(const std::string& tenant) const;
  const std::string& TenantOf(Id id) const {
    return index_.namespaces().TenantOf(index_.NamespaceOf(id));
  }

  const ResourceLimits& limits_;
  const BlockIndex& index_;
  const Medium& medium_;
  std::unique_ptr<EvictionPolicy> policy_;
  bool policy_sized_ = false;  // told the capacity (the block count when it first filled)
  bool draining_ = false;
  mutable uint64_t eligibility_checks_ = 0;
  std::map<std::string, TenantCounters> counters_;
};

}  // namespace gpucache
