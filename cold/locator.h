// Locators: `locators/<tenant>/<ns>/<block>`, how a refill finds a block from its identity
// alone (docs/cold-format.md, "Locator v2").
//
// v2 is sealed and self-sufficient: it names the block's pack object, byte range, XXH3-128 and
// identity digest (and the manifest, for reclaim and reseal), under an HMAC-SHA256 seal with
// the tenant's key. A refill is one locator GET and one range GET of the pack; the manifest is
// not read. v1 ("gpucache-locator 1 <manifest hex>\n") only names a manifest and carries no
// seal: it decodes (version 1) so a reader can refuse it, or follow it under accept_unsealed.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cold/digest.h"
#include "cold/keyring.h"
#include "cold/manifest.h"
#include "store/layout.h"

namespace gpucache::cold {

inline constexpr uint16_t kLocatorVersion = 2;
inline constexpr std::string_view kLocatorSealDomain = "gpucache-locator-v2";

struct Locator {
  uint16_t version = kLocatorVersion;  // 1: only manifest_digest is meaningful
  BlockAddress address;                // the block whose key this locator must be under
  Sha256 manifest_digest{};            // the manifest listing this block (its body digest)
  Sha256 object_digest{};              // the pack object: PackKey(prefix, object_digest)
  uint64_t offset = 0;                 // the payload's range in the pack object
  uint64_t length = 0;
  std::array<uint8_t, 16> checksum{};  // XXH3-128 of the payload
  Sha256 identity_digest{};            // SHA-256 of the block's canonical identity (GPCK)
  Keyring::Seal seal;                  // v2: under the tenant's key
};

// A sealed v2 locator for `entry` of manifest `m` (whose digest is `manifest_digest`).
Locator SealedLocator(const Manifest& m, const Sha256& manifest_digest, const ManifestEntry& entry,
                      const Keyring& keyring);
// Re-seals a v2 locator under the keyring's current key.
void SealLocator(Locator& l, const Keyring& keyring);
// kUnsealed for v1; else whether the seal verifies under the address's tenant key.
SealCheck VerifyLocator(const Keyring& keyring, const Locator& l);

// The bytes a v2 seal covers: the encoded locator up to, not including, its key id.
std::vector<uint8_t> LocatorSealedPart(const Locator& l);

// REQUIRES: l.version == 2 and a valid address.
std::vector<uint8_t> EncodeLocator(const Locator& l);
// v1, the unsealed text form (reading old buckets; tests).
std::vector<uint8_t> EncodeLegacyLocator(const Sha256& manifest_digest);
// Strict: v2 binary or v1 text, exact lengths, valid names; nullopt for anything else.
std::optional<Locator> DecodeLocator(std::span<const uint8_t> bytes);

}  // namespace gpucache::cold
