// Seals: HMAC-SHA256 over the cold tier's metadata (manifests and locators) under a per-tenant
// key (docs/cold-format.md, "Seals"; adr/0012).
//
// Content addresses prove that an object is the one its key names, not who wrote it: anyone
// who can write the bucket can write a consistent pack, manifest and locator for any identity.
// A seal is what a writer without the key cannot produce. Every tenant has its own key,
// derived from a cluster secret with HKDF-SHA256, so a key handed to one tenant's writers
// cannot seal another tenant's objects.
//
// Every MAC is domain-separated (what kind of object), bound to the tenant and to the key id
// it claims, so neither a seal nor its key id can be moved to another object, tenant or key.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace gpucache::cold {

using SealMac = std::array<uint8_t, 32>;  // HMAC-SHA256
using TenantKey = std::array<uint8_t, 32>;

// Key ids: 1..32 of [A-Za-z0-9._-], so they fit a u8-prefixed field and a log line.
bool IsValidKeyId(std::string_view id);

// HKDF-SHA256 (RFC 5869): IKM the cluster secret, salt "gpucache-cold-seal",
// info "tenant-key\0<tenant>", 32 bytes.
TenantKey DeriveTenantKey(std::span<const uint8_t> cluster_secret, std::string_view tenant);

// HMAC-SHA256(key, domain || 0x00 || u8 len || tenant || u8 len || key_id || message).
SealMac ComputeSealMac(const TenantKey& key, std::string_view domain, std::string_view tenant,
                       std::string_view key_id, std::span<const uint8_t> message);

// Constant-time comparison.
bool SealMacEqual(const SealMac& a, const SealMac& b);

// Why a seal was not accepted.
enum class SealCheck : uint8_t {
  kOk,
  kUnsealed,    // an old (v3 manifest / v1 locator) object without a seal
  kUnknownKey,  // sealed under a key id the keyring does not hold
  kBadSeal,     // the MAC does not match: forged, damaged, or another tenant's key
};
std::string_view ToString(SealCheck c);

}  // namespace gpucache::cold
