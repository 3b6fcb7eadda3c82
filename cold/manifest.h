// Manifest v4 and the cold tier's object keys (docs/cold-format.md).
//
// A pack object holds the payloads of several committed blocks back to back. Its manifest
// lists, for each payload range, the block's tenant and address, the SHA-256 of the block's
// validated canonical identity (GPCK), and the XXH3-128 of the payload. Both are
// content-addressed: `packs/<sha256 of the object>` and `manifests/<sha256 of the manifest>`,
// so a key is the proof of its content. A locator `locators/<tenant>/<ns>/<block>` names the
// manifest that holds a block, which is how a refill finds it from an identity alone.
//
// v4 adds seals (cold/seal.h): one HMAC-SHA256 per tenant in the manifest, over the manifest
// body, under that tenant's key. The manifest's key is the SHA-256 of its *body* (everything
// before the seals), so re-sealing under a new key rewrites the object under the same key and
// every locator and retention record that names it stays valid. v3 is the same body without
// seals: decoded (kNone, no seals) so callers can apply the `accept_unsealed` rule.
//
// Manifests come from the object store and are hostile: DecodeManifest is strict (exact
// lengths, no trailing bytes, valid names, ranges inside the object, sorted and disjoint,
// no duplicate address, one seal per tenant in it) and reports v1/v2 manifests as kLegacy, which callers treat as
// Missing: those formats did not bind ranges to identities.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cold/digest.h"
#include "cold/keyring.h"
#include "store/identity.h"
#include "store/layout.h"

namespace gpucache::cold {

inline constexpr uint16_t kManifestVersion = 4;          // sealed
inline constexpr uint16_t kUnsealedManifestVersion = 3;  // read only under accept_unsealed
inline constexpr std::string_view kManifestSealDomain = "gpucache-manifest-v4";
inline constexpr uint32_t kMaxManifestEntries = 4096;
inline constexpr uint64_t kMaxManifestBytes = 1 << 20;  // what a reader will download
inline constexpr uint64_t kMaxLocatorBytes = 512;

struct ManifestEntry {
  BlockAddress address;      // tenant/namespace/block of the committed block
  Sha256 identity_digest{};  // SHA-256 of the block's canonical identity (GPCK)
  uint64_t offset = 0;       // payload range in the pack object
  uint64_t length = 0;
  std::array<uint8_t, 16> checksum{};  // XXH3-128 of the payload, as the hot tier stores it
  bool operator==(const ManifestEntry&) const = default;
};

struct TenantSeal {
  std::string tenant;
  Keyring::Seal seal;
  bool operator==(const TenantSeal& o) const {
    return tenant == o.tenant && seal.key_id == o.seal.key_id && seal.mac == o.seal.mac;
  }
};

struct Manifest {
  Sha256 object_digest{};  // SHA-256 of the whole pack object
  uint64_t object_size = 0;
  uint64_t created_unix_ns = 0;
  std::vector<ManifestEntry> entries;
  std::vector<TenantSeal> seals;  // v4: one per tenant of the entries, sorted; empty: v3
  bool operator==(const Manifest&) const = default;
};

enum class ManifestError : uint8_t { kNone, kMalformed, kLegacy };

struct DecodedManifest {
  ManifestError error = ManifestError::kNone;
  uint16_t version = 0;  // as read, when the header could be read
  std::string detail;    // why it was refused, for logs and reports
  Manifest manifest;     // meaningful when error == kNone
  Sha256 body_digest{};  // SHA-256 of the body: what the manifest's key must name
};

// REQUIRES: entries are valid, sorted by offset, disjoint, inside object_size.
// v4 when m.seals is set, else v3 (tests and tools only: the tier never writes v3).
std::vector<uint8_t> EncodeManifest(const Manifest& m);
DecodedManifest DecodeManifest(std::span<const uint8_t> bytes);
// The digest a manifest is stored under: SHA-256 of its body (seals excluded).
Sha256 ManifestDigest(const Manifest& m);

// Replaces m.seals with one seal per tenant under the keyring's current key.
void SealManifest(Manifest& m, const Keyring& keyring);
// kOk when `tenant`'s seal (or, with an empty `tenant`, every seal) verifies; else the first
// failure. A manifest without seals (v3) is kUnsealed.
SealCheck VerifyManifest(const Keyring& keyring, const Manifest& m, std::string_view tenant = "");

// Object keys, all under the configured prefix (which ends with '/' or is empty).
std::string PackKey(std::string_view prefix, const Sha256& object_digest);
std::string ManifestKey(std::string_view prefix, const Sha256& manifest_digest);
std::string LocatorKey(std::string_view prefix, const BlockAddress& address);
std::string RetentionKey(std::string_view prefix, const Sha256& manifest_digest);
inline std::string ManifestPrefix(std::string_view prefix) {
  return std::string(prefix) + "manifests/";
}
// The retention record (docs/cold-format.md): keep the manifest until `retain_until_unix_ns`.
std::string EncodeRetention(uint64_t retain_until_unix_ns);
// Its deadline; UINT64_MAX (keep forever, until fixed by hand) for a record that does not
// parse: an unreadable record must not shorten retention.
uint64_t DecodeRetention(std::string_view record);

// The manifest digest a manifest key names, if `key` is one.
std::optional<Sha256> ManifestDigestOfKey(std::string_view prefix, std::string_view key);

std::optional<Sha256> Sha256FromHex(std::string_view hex);
// The hot tier's "xxh3-128:<hex>" or bare hex checksum as bytes.
std::optional<std::array<uint8_t, 16>> ChecksumFromText(std::string_view text);

}  // namespace gpucache::cold
