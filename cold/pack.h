// Packing committed blocks into one object plus its manifest, and validating such a pair.
//
// A PackedPair is what the sink uploads: the object, the sealed manifest and one sealed
// locator per block, each with its key. The builder seals under the keyring's current key. ValidatePair re-derives every digest and checksum
// from the bytes, so a pair that reaches the object store is consistent by construction and
// a refill can trust a range that matches its manifest entry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cold/keyring.h"
#include "cold/manifest.h"
#include "store/identity.h"

namespace gpucache::cold {

// Pack object header: "GPCP", u16 version 1, u16 0, u32 entry count, u32 0. Payloads follow.
inline constexpr size_t kPackHeaderBytes = 16;

struct PackedPair {
  std::string object_key;
  std::vector<uint8_t> object;
  std::string manifest_key;
  std::vector<uint8_t> manifest;
  Sha256 manifest_digest{};  // of the manifest's body (its key)
  Manifest decoded;  // what `manifest` encodes
  std::vector<std::vector<uint8_t>> locators;  // sealed v2, one per entry of `decoded`
  uint64_t bytes() const { return object.size() + manifest.size(); }
};

// Collects verified payloads. Not thread-safe.
class PackBuilder {
 public:
  // REQUIRES: keyring != nullptr.
  PackBuilder(std::string prefix, std::shared_ptr<const Keyring> keyring)
      : prefix_(std::move(prefix)), keyring_(std::move(keyring)) {}
  // REQUIRES: `canonical_identity` is a valid GPCK whose address is `address`, and `payload`
  // was read through a verifying reader. Returns false (and adds nothing) for a duplicate.
  bool Add(const BlockAddress& address, std::span<const uint8_t> canonical_identity,
           std::span<const uint8_t> payload);
  // As Add, but the payload is read straight into the pack object (no copy): `fill` must
  // write all `size` bytes of the span it gets and return true; on false nothing is added.
  bool AddFilled(const BlockAddress& address, std::span<const uint8_t> canonical_identity,
                 uint64_t size, const std::function<bool(std::span<uint8_t>)>& fill);
  // Reserves room for this many payload bytes (a pack's target), so the object is not moved
  // as it grows. Address space only: pages are touched as payloads arrive.
  // Capped at 256 MiB (a larger target grows the object as usual).
  void Reserve(uint64_t payload_bytes) {
    object_.reserve(kPackHeaderBytes + std::min<uint64_t>(payload_bytes, 256ull << 20));
  }
  size_t count() const { return entries_.size(); }
  uint64_t payload_bytes() const { return object_.size() - kPackHeaderBytes; }
  // REQUIRES: count() > 0. Resets the builder.
  PackedPair Build(uint64_t created_unix_ns);

 private:
  bool Has(const BlockAddress& address) const;
  std::string prefix_;
  std::shared_ptr<const Keyring> keyring_;
  std::vector<ManifestEntry> entries_;
  std::vector<uint8_t> object_ = std::vector<uint8_t>(kPackHeaderBytes);  // header, then payloads
};

// "" if the pair is consistent: keys match contents, the manifest decodes as sealed v4, the
// object's digest and size match, every range's checksum matches its bytes, and every
// locator is a v2 locator of its entry. Else why not. (Seals are checked by readers, which
// hold the keyring; a pair is built by this process, so this guards against bugs.)
std::string ValidatePair(std::string_view prefix, const PackedPair& pair);

// The XXH3-128 of a payload as a manifest stores it.
std::array<uint8_t, 16> PayloadChecksum(std::span<const uint8_t> payload);

// PayloadChecksum of a payload fed in pieces, in order (a refill hashes what it streams).
class PayloadChecksummer {
 public:
  PayloadChecksummer();
  ~PayloadChecksummer();
  PayloadChecksummer(const PayloadChecksummer&) = delete;
  PayloadChecksummer& operator=(const PayloadChecksummer&) = delete;
  void Reset();
  void Update(std::span<const uint8_t> bytes);
  std::array<uint8_t, 16> Finish() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gpucache::cold
