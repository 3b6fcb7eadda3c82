#include "cold/manifest.h"

#include "store/codec.h"

#include <charconv>
#include <cstring>
#include <set>

namespace gpucache::cold {
namespace {

constexpr char kMagic[4] = {'G', 'P', 'C', 'M'};

DecodedManifest Refuse(ManifestError e, uint16_t version, std::string detail) {
  DecodedManifest d;
  d.error = e;
  d.version = version;
  d.detail = std::move(detail);
  return d;
}

// Why the entries cannot describe one pack object, or "" if they can.
std::string CheckEntries(const Manifest& m) {
  uint64_t end = 0;
  std::set<BlockAddress> seen;
  for (const ManifestEntry& e : m.entries) {
    const BlockAddress& a = e.address;
    if (!IsValidTenantName(a.tenant) || !IsValidNamespaceName(a.ns) ||
        !IsValidBlockName(a.block)) {
      return "entry with an invalid tenant, namespace or block name";
    }
    if (e.offset < end) return "entries overlap or are not sorted by offset";
    if (e.length > m.object_size || e.offset > m.object_size - e.length) {
      return "entry range past the end of the object";
    }
    end = e.offset + e.length;
    if (!seen.insert(a).second) return "the same block appears twice";
  }
  return "";
}

}  // namespace

namespace {

std::vector<uint8_t> EncodeBody(const Manifest& m, uint16_t version) {
  ByteWriter w;
  w.Raw(std::string_view(kMagic, 4));
  w.U16(version);
  w.U16(0);
  w.Raw(m.object_digest);
  w.U64(m.object_size);
  w.U64(m.created_unix_ns);
  w.U32(static_cast<uint32_t>(m.entries.size()));
  for (const ManifestEntry& e : m.entries) {
    w.Str8(e.address.tenant);
    w.Str8(e.address.ns);
    w.Str8(e.address.block);
    w.Raw(e.identity_digest);
    w.U64(e.offset);
    w.U64(e.length);
    w.Raw(e.checksum);
  }
  return w.Take();
}

uint16_t VersionOf(const Manifest& m) {
  return m.seals.empty() ? kUnsealedManifestVersion : kManifestVersion;
}

std::set<std::string> TenantsOf(const Manifest& m) {
  std::set<std::string> out;
  for (const ManifestEntry& e : m.entries) out.insert(e.address.tenant);
  return out;
}

// The seal block of a v4 manifest: u8 count, then per seal tenant, key id, MAC. Exactly one
// seal per tenant of the entries, in tenant order.
std::string ReadSeals(ByteReader& r, Manifest& m) {
  uint8_t count = r.U8();
  for (uint8_t i = 0; i < count && r.ok(); i++) {
    TenantSeal s;
    s.tenant = r.Str8();
    s.seal.key_id = r.Str8();
    s.seal.mac = r.Array<32>();
    if (r.ok() && !IsValidKeyId(s.seal.key_id)) return "seal with an invalid key id";
    m.seals.push_back(std::move(s));
  }
  if (!r.ok()) return "truncated seals";
  std::set<std::string> tenants = TenantsOf(m);
  if (m.seals.size() != tenants.size()) return "not exactly one seal per tenant";
  auto t = tenants.begin();
  for (const TenantSeal& s : m.seals) {
    if (s.tenant != *t++) return "seals do not match the entries' tenants, in order";
  }
  return "";
}

}  // namespace

std::vector<uint8_t> EncodeManifest(const Manifest& m) {
  std::vector<uint8_t> out = EncodeBody(m, VersionOf(m));
  if (m.seals.empty()) return out;
  ByteWriter w;
  w.U8(static_cast<uint8_t>(m.seals.size()));
  for (const TenantSeal& s : m.seals) {
    w.Str8(s.tenant);
    w.Str8(s.seal.key_id);
    w.Raw(s.seal.mac);
  }
  std::vector<uint8_t> tail = w.Take();
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

Sha256 ManifestDigest(const Manifest& m) { return ComputeSha256(EncodeBody(m, VersionOf(m))); }

void SealManifest(Manifest& m, const Keyring& keyring) {
  m.seals.clear();
  std::vector<uint8_t> body = EncodeBody(m, kManifestVersion);
  for (const std::string& t : TenantsOf(m)) {
    m.seals.push_back({t, keyring.SealFor(kManifestSealDomain, t, body)});
  }
}

SealCheck VerifyManifest(const Keyring& keyring, const Manifest& m, std::string_view tenant) {
  if (m.seals.empty()) return SealCheck::kUnsealed;
  std::vector<uint8_t> body = EncodeBody(m, kManifestVersion);
  bool found = false;
  for (const TenantSeal& s : m.seals) {
    if (!tenant.empty() && s.tenant != tenant) continue;
    found = true;
    SealCheck c = keyring.Verify(kManifestSealDomain, s.tenant, body, s.seal);
    if (c != SealCheck::kOk) return c;
  }
  return found ? SealCheck::kOk : SealCheck::kBadSeal;
}

DecodedManifest DecodeManifest(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  auto magic = r.Array<4>();
  if (!r.ok() || std::memcmp(magic.data(), kMagic, 4) != 0) {
    return Refuse(ManifestError::kMalformed, 0, "not a gpucache manifest (magic)");
  }
  uint16_t version = r.U16();
  if (!r.ok()) return Refuse(ManifestError::kMalformed, 0, "truncated header");
  if (version == 1 || version == 2) {
    return Refuse(ManifestError::kLegacy, version,
                  "legacy manifest v" + std::to_string(version) +
                      " does not bind ranges to identities: recompute and repack");
  }
  if (version != kManifestVersion && version != kUnsealedManifestVersion) {
    return Refuse(ManifestError::kMalformed, version, "unknown manifest version");
  }
  DecodedManifest d;
  d.version = version;
  Manifest& m = d.manifest;
  uint16_t reserved = r.U16();
  m.object_digest = r.Array<32>();
  m.object_size = r.U64();
  m.created_unix_ns = r.U64();
  uint32_t count = r.U32();
  if (!r.ok() || reserved != 0 || count == 0 || count > kMaxManifestEntries) {
    return Refuse(ManifestError::kMalformed, version, "bad header fields");
  }
  m.entries.reserve(count);
  for (uint32_t i = 0; i < count && r.ok(); i++) {
    ManifestEntry e;
    e.address.tenant = r.Str8();
    e.address.ns = r.Str8();
    e.address.block = r.Str8();
    e.identity_digest = r.Array<32>();
    e.offset = r.U64();
    e.length = r.U64();
    e.checksum = r.Array<16>();
    m.entries.push_back(std::move(e));
  }
  if (!r.ok()) return Refuse(ManifestError::kMalformed, version, "truncated entries");
  d.body_digest = ComputeSha256(bytes.subspan(0, r.pos()));
  if (std::string why = CheckEntries(m); !why.empty()) {
    return Refuse(ManifestError::kMalformed, version, why);
  }
  if (version == kManifestVersion) {
    if (std::string why = ReadSeals(r, m); !why.empty()) {
      return Refuse(ManifestError::kMalformed, version, why);
    }
  }
  if (!r.AtEnd()) return Refuse(ManifestError::kMalformed, version, "trailing bytes");
  return d;
}

std::string PackKey(std::string_view prefix, const Sha256& d) {
  return std::string(prefix) + "packs/" + ToHex(d);
}
std::string ManifestKey(std::string_view prefix, const Sha256& d) {
  return ManifestPrefix(prefix) + ToHex(d);
}
std::string LocatorKey(std::string_view prefix, const BlockAddress& a) {
  return std::string(prefix) + "locators/" + a.RelativePath();
}
std::string RetentionKey(std::string_view prefix, const Sha256& d) {
  return std::string(prefix) + "retention/" + ToHex(d);
}

namespace {
constexpr std::string_view kRetentionTag = "gpucache-retention 1 ";
}  // namespace

std::string EncodeRetention(uint64_t until) {
  return std::string(kRetentionTag) + std::to_string(until) + "\n";
}

uint64_t DecodeRetention(std::string_view s) {
  if (s.substr(0, kRetentionTag.size()) != kRetentionTag || s.empty() || s.back() != '\n') return UINT64_MAX;
  s = s.substr(kRetentionTag.size(), s.size() - kRetentionTag.size() - 1);
  uint64_t until = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), until);
  if (ec != std::errc() || p != s.data() + s.size()) return UINT64_MAX;
  return until;
}

std::optional<Sha256> ManifestDigestOfKey(std::string_view prefix, std::string_view key) {
  std::string head = ManifestPrefix(prefix);
  if (key.substr(0, head.size()) != head) return std::nullopt;
  return Sha256FromHex(key.substr(head.size()));
}

std::optional<Sha256> Sha256FromHex(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;  // canonical
  }
  auto bytes = HexDecode(hex);
  if (!bytes || bytes->size() != 32) return std::nullopt;
  Sha256 out{};
  std::memcpy(out.data(), bytes->data(), 32);
  return out;
}

std::optional<std::array<uint8_t, 16>> ChecksumFromText(std::string_view text) {
  constexpr std::string_view kTag = "xxh3-128:";
  if (text.substr(0, kTag.size()) == kTag) text.remove_prefix(kTag.size());
  auto bytes = text.size() == 32 ? HexDecode(text) : std::nullopt;
  if (!bytes || bytes->size() != 16) return std::nullopt;
  std::array<uint8_t, 16> out{};
  std::memcpy(out.data(), bytes->data(), 16);
  return out;
}

}  // namespace gpucache::cold
