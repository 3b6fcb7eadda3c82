// Refill: bringing a packed block back from the object store (docs/cold-tier.md, "Refill").
//
// Every refill names the full expected identity (GPCK) and comes from a caller the daemon has
// authenticated (its uid) and authorized (the tenants it may act for). The order of checks is
// the contract, because each one protects something:
//   1. the identity decodes and validates                       -> kInvalid, no request made
//   2. its tenant is one the caller may act for                 -> kWrongTenant, no request made
//   3. its tenant is not retired                                -> kRetired, no request made
//   4. locator, then manifest (bounded sizes, content-addressed) -> Missing when absent,
//      unreachable, malformed or legacy (v1/v2), before any payload byte is fetched
//   5. the manifest entry binds this address to SHA-256(expected GPCK) -> else Missing
//   6. the range fits the caller's byte budget                  -> else Missing, no download
//   7. the downloaded range matches the entry's XXH3-128        -> else Missing (corrupt)
// A slow or unreachable object store is Missing (the client's timeouts bound the wait). The
// hot store is touched only after a verified hit, through the normal commit path
// (CommitRefill), so its limits, quotas and checksums apply as to any other fill.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cold/object_store.h"
#include "store/block_store.h"

namespace gpucache::cold {

// What the daemon established about the caller.
struct Authorization {
  std::set<std::string> tenants;  // tenants the caller is a member of
  bool any_tenant = false;        // an admin
  bool MayActFor(const std::string& tenant) const {
    return any_tenant || tenants.count(tenant) > 0;
  }
};

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
};
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

// Thread safety: const after construction; the object store synchronizes itself.
class Refiller {
 public:
  Refiller(ObjectStore& objects, std::string prefix, std::set<std::string> retired_tenants)
      : objects_(objects), prefix_(std::move(prefix)), retired_(std::move(retired_tenants)) {}

  RefillOutcome Fetch(const Authorization& who, std::span<const uint8_t> expected_identity,
                      uint64_t byte_budget) const;

 private:
  ObjectStore& objects_;
  const std::string prefix_;
  const std::set<std::string> retired_;
};

// Commits a verified refill into the hot store as `owner`: Reserve, SetIdentity, Write,
// Commit (Abort on failure). kExists when the block is already committed or being filled.
StatusCode CommitRefill(BlockStore& store, Owner owner, std::span<const uint8_t> identity,
                        std::span<const uint8_t> payload);

}  // namespace gpucache::cold
