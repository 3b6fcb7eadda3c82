#include "cold/manifest.h"

#include <cstring>
#include <set>

namespace gpucache::cold {
namespace {

constexpr char kMagic[4] = {'G', 'P', 'C', 'M'};
constexpr std::string_view kLocatorTag = "gpucache-locator 1 ";

void PutU8(std::vector<uint8_t>& out, uint8_t v) { out.push_back(v); }
void PutLe(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutBytes(std::vector<uint8_t>& out, std::span<const uint8_t> b) {
  out.insert(out.end(), b.begin(), b.end());
}
void PutName(std::vector<uint8_t>& out, const std::string& s) {
  PutU8(out, static_cast<uint8_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// Bounds-checked little-endian reader over hostile bytes: every read either succeeds or
// marks the whole decode failed; nothing reads past the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == b_.size(); }
  uint64_t Le(int bytes) {
    if (!Need(bytes)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= uint64_t{b_[pos_ + i]} << (8 * i);
    pos_ += bytes;
    return v;
  }
  template <size_t N>
  std::array<uint8_t, N> Array() {
    std::array<uint8_t, N> a{};
    if (Need(N)) {
      std::memcpy(a.data(), b_.data() + pos_, N);
      pos_ += N;
    }
    return a;
  }
  std::string Name() {
    uint64_t n = Le(1);
    if (!Need(n)) return {};
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  bool Need(uint64_t n) {
    if (!ok_ || n > b_.size() - pos_) ok_ = false;
    return ok_;
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

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

std::vector<uint8_t> EncodeManifest(const Manifest& m) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  PutLe(out, kManifestVersion, 2);
  PutLe(out, 0, 2);
  PutBytes(out, m.object_digest);
  PutLe(out, m.object_size, 8);
  PutLe(out, m.created_unix_ns, 8);
  PutLe(out, m.entries.size(), 4);
  for (const ManifestEntry& e : m.entries) {
    PutName(out, e.address.tenant);
    PutName(out, e.address.ns);
    PutName(out, e.address.block);
    PutBytes(out, e.identity_digest);
    PutLe(out, e.offset, 8);
    PutLe(out, e.length, 8);
    PutBytes(out, e.checksum);
  }
  return out;
}

DecodedManifest DecodeManifest(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  auto magic = r.Array<4>();
  if (!r.ok() || std::memcmp(magic.data(), kMagic, 4) != 0) {
    return Refuse(ManifestError::kMalformed, 0, "not a gpucache manifest (magic)");
  }
  auto version = static_cast<uint16_t>(r.Le(2));
  if (!r.ok()) return Refuse(ManifestError::kMalformed, 0, "truncated header");
  if (version == 1 || version == 2) {
    return Refuse(ManifestError::kLegacy, version,
                  "legacy manifest v" + std::to_string(version) +
                      " does not bind ranges to identities: recompute and repack");
  }
  if (version != kManifestVersion) {
    return Refuse(ManifestError::kMalformed, version, "unknown manifest version");
  }
  DecodedManifest d;
  d.version = version;
  Manifest& m = d.manifest;
  uint64_t reserved = r.Le(2);
  m.object_digest = r.Array<32>();
  m.object_size = r.Le(8);
  m.created_unix_ns = r.Le(8);
  uint64_t count = r.Le(4);
  if (!r.ok() || reserved != 0 || count == 0 || count > kMaxManifestEntries) {
    return Refuse(ManifestError::kMalformed, version, "bad header fields");
  }
  m.entries.reserve(count);
  for (uint64_t i = 0; i < count && r.ok(); i++) {
    ManifestEntry e;
    e.address.tenant = r.Name();
    e.address.ns = r.Name();
    e.address.block = r.Name();
    e.identity_digest = r.Array<32>();
    e.offset = r.Le(8);
    e.length = r.Le(8);
    e.checksum = r.Array<16>();
    m.entries.push_back(std::move(e));
  }
  if (!r.ok()) return Refuse(ManifestError::kMalformed, version, "truncated entries");
  if (!r.done()) return Refuse(ManifestError::kMalformed, version, "trailing bytes");
  if (std::string why = CheckEntries(m); !why.empty()) {
    return Refuse(ManifestError::kMalformed, version, why);
  }
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

std::optional<Sha256> ManifestDigestOfKey(std::string_view prefix, std::string_view key) {
  std::string head = ManifestPrefix(prefix);
  if (key.substr(0, head.size()) != head) return std::nullopt;
  return Sha256FromHex(key.substr(head.size()));
}

std::vector<uint8_t> EncodeLocator(const Sha256& manifest_digest) {
  std::string s = std::string(kLocatorTag) + ToHex(manifest_digest) + "\n";
  return {s.begin(), s.end()};
}

std::optional<Sha256> DecodeLocator(std::span<const uint8_t> bytes) {
  std::string_view s(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (s.size() != kLocatorTag.size() + 64 + 1 || s.substr(0, kLocatorTag.size()) != kLocatorTag ||
      s.back() != '\n') {
    return std::nullopt;
  }
  return Sha256FromHex(s.substr(kLocatorTag.size(), 64));
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
