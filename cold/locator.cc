#include "cold/locator.h"

#include <cstring>

#include "store/codec.h"

namespace gpucache::cold {
namespace {

constexpr char kMagic[4] = {'G', 'P', 'C', 'L'};
constexpr std::string_view kLegacyTag = "gpucache-locator 1 ";

}  // namespace

std::vector<uint8_t> LocatorSealedPart(const Locator& l) {
  ByteWriter w;
  w.Raw(std::string_view(kMagic, 4));
  w.U16(kLocatorVersion);
  w.U16(0);
  w.Str8(l.address.tenant);
  w.Str8(l.address.ns);
  w.Str8(l.address.block);
  w.Raw(l.manifest_digest);
  w.Raw(l.object_digest);
  w.U64(l.offset);
  w.U64(l.length);
  w.Raw(l.checksum);
  w.Raw(l.identity_digest);
  return w.Take();
}

namespace {

std::optional<Locator> DecodeLegacy(std::string_view s) {
  if (s.size() != kLegacyTag.size() + 64 + 1 || s.substr(0, kLegacyTag.size()) != kLegacyTag ||
      s.back() != '\n') {
    return std::nullopt;
  }
  auto md = Sha256FromHex(s.substr(kLegacyTag.size(), 64));
  if (!md) return std::nullopt;
  Locator l;
  l.version = 1;
  l.manifest_digest = *md;
  return l;
}

}  // namespace

Locator SealedLocator(const Manifest& m, const Sha256& manifest_digest, const ManifestEntry& e,
                      const Keyring& keyring) {
  Locator l;
  l.address = e.address;
  l.manifest_digest = manifest_digest;
  l.object_digest = m.object_digest;
  l.offset = e.offset;
  l.length = e.length;
  l.checksum = e.checksum;
  l.identity_digest = e.identity_digest;
  SealLocator(l, keyring);
  return l;
}

void SealLocator(Locator& l, const Keyring& keyring) {
  l.seal = keyring.SealFor(kLocatorSealDomain, l.address.tenant, LocatorSealedPart(l));
}

SealCheck VerifyLocator(const Keyring& keyring, const Locator& l) {
  if (l.version != kLocatorVersion) return SealCheck::kUnsealed;
  return keyring.Verify(kLocatorSealDomain, l.address.tenant, LocatorSealedPart(l), l.seal);
}

std::vector<uint8_t> EncodeLocator(const Locator& l) {
  std::vector<uint8_t> out = LocatorSealedPart(l);
  ByteWriter w;
  w.Str8(l.seal.key_id);
  w.Raw(l.seal.mac);
  std::vector<uint8_t> tail = w.Take();
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

std::vector<uint8_t> EncodeLegacyLocator(const Sha256& manifest_digest) {
  std::string s = std::string(kLegacyTag) + ToHex(manifest_digest) + "\n";
  return {s.begin(), s.end()};
}

std::optional<Locator> DecodeLocator(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxLocatorBytes) return std::nullopt;
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.substr(0, kLegacyTag.size()) == kLegacyTag) return DecodeLegacy(text);
  ByteReader r(bytes);
  auto magic = r.Array<4>();
  uint16_t version = r.U16();
  uint16_t reserved = r.U16();
  if (!r.ok() || std::memcmp(magic.data(), kMagic, 4) != 0 || version != kLocatorVersion ||
      reserved != 0) {
    return std::nullopt;
  }
  Locator l;
  l.address.tenant = r.Str8();
  l.address.ns = r.Str8();
  l.address.block = r.Str8();
  l.manifest_digest = r.Array<32>();
  l.object_digest = r.Array<32>();
  l.offset = r.U64();
  l.length = r.U64();
  l.checksum = r.Array<16>();
  l.identity_digest = r.Array<32>();
  l.seal.key_id = r.Str8();
  l.seal.mac = r.Array<32>();
  if (!r.ok() || !r.AtEnd()) return std::nullopt;
  if (!IsValidTenantName(l.address.tenant) || !IsValidNamespaceName(l.address.ns) ||
      !IsValidBlockName(l.address.block) || !IsValidKeyId(l.seal.key_id) ||
      l.length > UINT64_MAX - l.offset) {
    return std::nullopt;
  }
  return l;
}

}  // namespace gpucache::cold
