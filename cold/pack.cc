#include "cold/pack.h"

#include "store/fast_hash.h"

#include <cstring>

#include "cold/locator.h"
#include "store/checksum.h"

namespace gpucache::cold {

namespace {

std::array<uint8_t, 16> Canonical(XXH128_hash_t h) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), canon.digest, out.size());
  return out;
}

}  // namespace

// The hot tier's whole-payload digest (XXH3-128, canonical bytes: PayloadChecksums::digest_hex
// in binary), so a refilled block's checksum equals the original's; only that one hash, not
// the per-chunk sums ComputeChecksums adds.
std::array<uint8_t, 16> PayloadChecksum(std::span<const uint8_t> payload) {
  return Canonical(XXH3_128bits(payload.data(), payload.size()));
}

struct PayloadChecksummer::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

PayloadChecksummer::PayloadChecksummer() : state_(std::make_unique<State>()) { Reset(); }
PayloadChecksummer::~PayloadChecksummer() = default;
void PayloadChecksummer::Reset() { XXH3_128bits_reset(state_->s); }
void PayloadChecksummer::Update(std::span<const uint8_t> bytes) {
  XXH3_128bits_update(state_->s, bytes.data(), bytes.size());
}
std::array<uint8_t, 16> PayloadChecksummer::Finish() const { return Canonical(XXH3_128bits_digest(state_->s)); }

bool PackBuilder::Has(const BlockAddress& address) const {
  for (const ManifestEntry& e : entries_) {
    if (e.address == address) return true;
  }
  return false;
}

bool PackBuilder::Add(const BlockAddress& address, std::span<const uint8_t> canonical_identity,
                      std::span<const uint8_t> payload) {
  return AddFilled(address, canonical_identity, payload.size(), [&](std::span<uint8_t> room) {
    std::copy(payload.begin(), payload.end(), room.begin());
    return true;
  });
}

bool PackBuilder::AddFilled(const BlockAddress& address, std::span<const uint8_t> canonical_identity,
                            uint64_t size, const std::function<bool(std::span<uint8_t>)>& fill) {
  if (Has(address)) return false;
  const uint64_t offset = object_.size();
  object_.resize(offset + size);
  std::span<uint8_t> room(object_.data() + offset, size);
  if (!fill(room)) {
    object_.resize(offset);
    return false;
  }
  ManifestEntry e;
  e.address = address;
  e.identity_digest = ComputeSha256(canonical_identity);
  e.offset = offset;
  e.length = size;
  e.checksum = PayloadChecksum(room);
  entries_.push_back(std::move(e));
  return true;
}

PackedPair PackBuilder::Build(uint64_t created_unix_ns) {
  PackedPair p;
  uint32_t n = static_cast<uint32_t>(entries_.size());
  const uint8_t header[kPackHeaderBytes] = {'G', 'P', 'C', 'P', 1, 0, 0, 0, static_cast<uint8_t>(n),
                                            static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
                                            static_cast<uint8_t>(n >> 24), 0, 0, 0, 0};
  std::copy(std::begin(header), std::end(header), object_.begin());
  p.object = std::move(object_);
  object_.assign(kPackHeaderBytes, 0);
  Manifest& m = p.decoded;
  m.object_digest = ComputeSha256(p.object);
  m.object_size = p.object.size();
  m.created_unix_ns = created_unix_ns;
  m.entries = std::move(entries_);
  SealManifest(m, *keyring_);
  p.manifest = EncodeManifest(m);
  p.manifest_digest = ManifestDigest(m);
  for (const ManifestEntry& e : m.entries) {
    p.locators.push_back(EncodeLocator(SealedLocator(m, p.manifest_digest, e, *keyring_)));
  }
  p.object_key = PackKey(prefix_, m.object_digest);
  p.manifest_key = ManifestKey(prefix_, p.manifest_digest);
  entries_.clear();
  return p;
}

std::string ValidatePair(std::string_view prefix, const PackedPair& pair) {
  DecodedManifest d = DecodeManifest(pair.manifest);
  if (d.error != ManifestError::kNone) return "manifest: " + d.detail;
  if (!(d.manifest == pair.decoded)) return "manifest bytes differ from the decoded manifest";
  if (d.version != kManifestVersion) return "manifest is not sealed";
  Sha256 md = d.body_digest;
  if (md != pair.manifest_digest || pair.manifest_key != ManifestKey(prefix, md)) {
    return "manifest key does not match its content";
  }
  const Manifest& m = d.manifest;
  if (ComputeSha256(pair.object) != m.object_digest || pair.object.size() != m.object_size ||
      pair.object_key != PackKey(prefix, m.object_digest)) {
    return "object does not match the manifest's digest, size or key";
  }
  for (const ManifestEntry& e : m.entries) {
    std::span<const uint8_t> range(pair.object.data() + e.offset, e.length);
    if (PayloadChecksum(range) != e.checksum) {
      return "checksum mismatch for " + e.address.RelativePath();
    }
  }
  if (pair.locators.size() != m.entries.size()) return "not one locator per entry";
  for (size_t i = 0; i < m.entries.size(); i++) {
    const ManifestEntry& e = m.entries[i];
    std::optional<Locator> l = DecodeLocator(pair.locators[i]);
    if (!l || l->version != kLocatorVersion || l->address != e.address ||
        l->manifest_digest != md || l->object_digest != m.object_digest ||
        l->offset != e.offset || l->length != e.length || l->checksum != e.checksum ||
        l->identity_digest != e.identity_digest) {
      return "locator does not match its entry for " + e.address.RelativePath();
    }
  }
  return "";
}

}  // namespace gpucache::cold
