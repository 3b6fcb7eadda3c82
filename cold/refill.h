// Refill: bringing a packed block back from the object store (docs/cold-tier.md, "Refill").
//
// Every refill names the full expected identity (GPCK) and comes from a caller the daemon has
// authenticated (its uid) and authorized (the tenants it may act for). The order of checks is
// the contract, because each one protects something:
//   1. the identity decodes and validates                       -> kInvalid, no request made
//   2. its tenant is one the caller may act for                 -> kWrongTenant, no request made
//   3. its tenant is not retired                                -> kRetired, no request made
//   4. the locator (bounded size) decodes and is this block's    -> Missing when absent,
//      unreachable or malformed, before any payload byte is fetched
//   5. its seal verifies under the tenant's key (cold/seal.h)   -> else Missing (unsealed,
//      unknown-key, bad-seal), counted in SealRefusals, before any payload byte is fetched
//   6. the locator binds this address to SHA-256(expected GPCK) -> else Missing
//   7. the range fits the caller's byte budget                  -> else Missing, no download
//   8. the downloaded range matches the locator's XXH3-128      -> else Missing (corrupt)
// A v2 locator carries the pack key, range, checksum and identity digest under its seal, so a
// refill is two GETs: the locator and the range. An unsealed v1 locator is refused at step 5
// unless `accept_unsealed` (docs/cold-tier.md): then its manifest is read as before (v3, or a
// v4 whose seal for the tenant must verify) and steps 6-8 use the manifest entry.
// A slow or unreachable object store is Missing (the client's timeouts bound the wait). The
// hot store is touched only after a verified hit, through the normal commit path
// (CommitRefill), so its limits, quotas and checksums apply as to any other fill.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cold/digest.h"
#include "cold/keyring.h"
#include "cold/object_store.h"
#include "common/principal.h"
#include "store/block_store.h"

namespace gpucache::cold {


enum class RefillStatus : uint8_t { kHit, kMissing, kWrongTenant, kRetired, kInvalid };
enum class MissingReason : uint8_t {
  kNone,
  kAbsent,            // no locator, or the manifest does not list the block
  kLegacyManifest,    // v1/v2: ranges are not bound to identities
  kIdentityMismatch,  // the entry's identity digest is not the expected identity's
  kOverBudget,        // the payload is larger than the request's byte budget
  kCorrupt,           // a digest or checksum did not match the bytes
  kMalformed,         // a locator or manifest that does not decode
  kUnavailable,       // the object store failed, timed out or is unreachable
  kUnsealed,          // a v1 locator / v3 manifest, refused without accept_unsealed
  kUnknownKey,        // sealed under a key id the keyring does not hold
  kBadSeal,           // the seal does not verify: forged, damaged or another tenant's key
  kInvalidated,       // this node's engine invalidated those bytes; their locator goes next
};
// How many MissingReason values there are (kInvalidated is the last): the size of a count per reason.
inline constexpr size_t kMissingReasonCount = static_cast<size_t>(MissingReason::kInvalidated) + 1;
std::string_view ToString(RefillStatus s);
std::string_view ToString(MissingReason r);

struct RefillOutcome {
  RefillStatus status = RefillStatus::kMissing;
  MissingReason reason = MissingReason::kNone;
  std::string detail;
  BlockAddress address;
  uint64_t payload_bytes_downloaded = 0;
  std::vector<uint8_t> payload;  // the verified payload on kHit
};

// Refills refused for their seal (each also a Missing refill).
struct SealRefusals {
  uint64_t unsealed = 0;
  uint64_t unknown_key = 0;
  uint64_t bad_seal = 0;
};

// Where a located block's payload is and what it must hash to (from its sealed locator, or its
// manifest under accept_unsealed).
struct PayloadRange {
  Sha256 object_digest{};
  uint64_t offset = 0;
  uint64_t length = 0;
  std::array<uint8_t, 16> checksum{};
  Sha256 identity_digest{};
};

// A refill after steps 1-7: `outcome` is the refusal or Missing to return, or, when ready(),
// has status kHit and an empty payload: `range` is what to download (step 8).
struct LocatedBlock {
  RefillOutcome outcome;
  PayloadRange range;
  Sha256 manifest{};   // the manifest that lists the block (from its locator, or known place)
  bool known = false;  // `range` is this node's known place (cold/known_places.h), no locator read
  bool sealed = false;  // `range` came from a locator whose seal verified (not a v1 one)
  bool ready() const { return outcome.status == RefillStatus::kHit; }
};

class KnownPlaces;

// Thread safety: const after construction but for atomic counters; the object store and
// SealKeys synchronize themselves.
class Refiller {
 public:
  Refiller(ObjectStore& objects, std::string prefix, std::set<std::string> retired_tenants,
           std::shared_ptr<const SealKeys> keys, bool accept_unsealed = false)
      : objects_(objects),
        prefix_(std::move(prefix)),
        retired_(std::move(retired_tenants)),
        keys_(std::move(keys)),
        accept_unsealed_(accept_unsealed) {}

  // Every step, the payload downloaded into memory.
  RefillOutcome Fetch(const Principal& who, std::span<const uint8_t> expected_identity,
                      uint64_t byte_budget) const;
  // Steps 1-7: no payload byte is fetched.
  LocatedBlock Locate(const Principal& who, std::span<const uint8_t> expected_identity,
                      uint64_t byte_budget) const;
  // Steps 1-3, then the block's place in `known` instead of its locator (steps 4-5: no request
  // is made), then steps 6-7 against it. ready() when a known place for exactly this identity
  // fits the budget; a refusal of steps 1-3 as Locate gives it; otherwise Missing (kAbsent):
  // nothing usable is known, and Locate decides.
  LocatedBlock LocateKnown(const Principal& who, std::span<const uint8_t> expected_identity,
                           uint64_t byte_budget, KnownPlaces& known) const;
  // Step 8 for a ready() block: downloads its range, handing every byte to `sink` as it
  // arrives, and checks them all against the range's checksum. kHit (with an empty payload)
  // only when exactly `range.length` bytes came and matched; the caller must keep nothing it
  // was handed unless it gets kHit (a sink that refused is Missing, unavailable, "aborted").
  RefillOutcome Stream(const LocatedBlock& block, const ObjectStore::RangeSink& sink) const;
  // Step 8 into memory: Stream, the verified payload in `payload` on kHit.
  RefillOutcome Buffer(const LocatedBlock& block) const;
  SealRefusals seal_refusals() const {
    return {unsealed_.load(), unknown_key_.load(), bad_seal_.load()};
  }

 private:
  RefillOutcome FetchLegacy(const BlockAddress& a, const Sha256& manifest, const Keyring& keys,
                            PayloadRange& out) const;
  RefillOutcome SealRefused(const BlockAddress& a, SealCheck c, std::string what) const;
  // Steps 1-3: the identity, or (nullopt) with `out.outcome` the refusal.
  std::optional<CacheIdentity> Admit(const Principal& who, std::span<const uint8_t> expected,
                                     LocatedBlock& out) const;
  // Steps 6-7 on `out.range`; ready() when both pass.
  void CheckRange(std::span<const uint8_t> expected, uint64_t byte_budget, LocatedBlock& out) const;

  ObjectStore& objects_;
  const std::string prefix_;
  const std::set<std::string> retired_;
  const std::shared_ptr<const SealKeys> keys_;
  const bool accept_unsealed_;
  mutable std::atomic<uint64_t> unsealed_{0}, unknown_key_{0}, bad_seal_{0};
};

// Commits a verified refill into the hot store as `owner`: Reserve, SetIdentity, Write,
// Commit (Abort on failure). kExists when the block is already committed or being filled.
StatusCode CommitRefill(BlockFills& store, Owner owner, std::span<const uint8_t> identity,
                        std::span<const uint8_t> payload);
// The first half of CommitRefill, for a payload that streams in: Reserve (recreating the
// namespace directory if it went away), SetIdentity, OpenWriter. Then Write..., and
// FinishRefill to commit, or to abort when `verified` is false.
Result<ReservationId> BeginRefill(BlockFills& store, Owner owner,
                                  std::span<const uint8_t> identity);
// Commits (`verified`) or aborts (then kChecksumMismatch) the reservation; Abort on failure.
StatusCode FinishRefill(BlockFills& store, ReservationId rid, bool verified);

}  // namespace gpucache::cold
