#include "cold/refill.h"

#include "cold/locator.h"
#include "cold/manifest.h"
#include "cold/pack.h"
#include "store/identity.h"
#include "store/layout.h"

namespace gpucache::cold {
namespace {

RefillOutcome Refused(RefillStatus s, std::string detail) {
  RefillOutcome o;
  o.status = s;
  o.detail = std::move(detail);
  return o;
}

RefillOutcome Missing(const BlockAddress& a, MissingReason r, std::string detail) {
  RefillOutcome o;
  o.status = RefillStatus::kMissing;
  o.reason = r;
  o.address = a;
  o.detail = std::move(detail);
  return o;
}

// A failed metadata GET as a Missing outcome: absent for 404, else unavailable.
RefillOutcome FromError(const BlockAddress& a, const ObjectError& e, const char* what) {
  if (e.kind == ObjectErrorKind::kNotFound) return Missing(a, MissingReason::kAbsent, "");
  return Missing(a, MissingReason::kUnavailable,
                 std::string(what) + ": " + std::string(ToString(e.kind)) + " " + e.code);
}

}  // namespace

std::string_view ToString(RefillStatus s) {
  switch (s) {
    case RefillStatus::kHit: return "hit";
    case RefillStatus::kMissing: return "missing";
    case RefillStatus::kWrongTenant: return "wrong-tenant";
    case RefillStatus::kRetired: return "retired-tenant";
    case RefillStatus::kInvalid: return "invalid";
  }
  return "?";
}

std::string_view ToString(MissingReason r) {
  switch (r) {
    case MissingReason::kNone: return "none";
    case MissingReason::kAbsent: return "absent";
    case MissingReason::kLegacyManifest: return "legacy-manifest";
    case MissingReason::kIdentityMismatch: return "identity-mismatch";
    case MissingReason::kOverBudget: return "over-budget";
    case MissingReason::kCorrupt: return "corrupt";
    case MissingReason::kMalformed: return "malformed";
    case MissingReason::kUnavailable: return "unavailable";
    case MissingReason::kUnsealed: return "unsealed";
    case MissingReason::kUnknownKey: return "unknown-key";
    case MissingReason::kBadSeal: return "bad-seal";
  }
  return "?";
}

struct Refiller::Range {
  Sha256 object_digest{};
  uint64_t offset = 0;
  uint64_t length = 0;
  std::array<uint8_t, 16> checksum{};
  Sha256 identity_digest{};
};

RefillOutcome Refiller::SealRefused(const BlockAddress& a, SealCheck c, std::string what) const {
  MissingReason r = MissingReason::kBadSeal;
  if (c == SealCheck::kUnsealed) unsealed_++, r = MissingReason::kUnsealed;
  else if (c == SealCheck::kUnknownKey) unknown_key_++, r = MissingReason::kUnknownKey;
  else bad_seal_++;
  return Missing(a, r, what + ": " + std::string(ToString(c)));
}

// A v1 locator under accept_unsealed: the manifest says where the block is. Returns an
// outcome with reason kNone when found (`out` set), else the Missing outcome to return.
RefillOutcome Refiller::FetchLegacy(const BlockAddress& a, const Sha256& md, const Keyring& keys,
                                    Range& out) const {
  auto mbytes = objects_.Get(ManifestKey(prefix_, md), kMaxManifestBytes);
  if (!mbytes.ok()) return FromError(a, mbytes.error(), "manifest");
  DecodedManifest d = DecodeManifest(mbytes.value());
  if (d.error == ManifestError::kLegacy) return Missing(a, MissingReason::kLegacyManifest, d.detail);
  if (d.error != ManifestError::kNone) return Missing(a, MissingReason::kMalformed, d.detail);
  if (d.body_digest != md) {
    return Missing(a, MissingReason::kCorrupt, "manifest does not match its content address");
  }
  if (d.version == kManifestVersion) {
    SealCheck c = VerifyManifest(keys, d.manifest, a.tenant);
    if (c != SealCheck::kOk) return SealRefused(a, c, "manifest");
  }
  for (const ManifestEntry& e : d.manifest.entries) {
    if (e.address != a) continue;
    out = Range{d.manifest.object_digest, e.offset, e.length, e.checksum, e.identity_digest};
    return Missing(a, MissingReason::kNone, "");
  }
  return Missing(a, MissingReason::kAbsent, "manifest does not list the block");
}

RefillOutcome Refiller::Fetch(const Principal& who, std::span<const uint8_t> expected,
                              uint64_t byte_budget) const {
  Result<CacheIdentity> id = DecodePhysicalKey(expected);
  if (!id.ok()) return Refused(RefillStatus::kInvalid, "identity is not a valid GPCK");
  if (!who.MayActFor(id->tenant)) {
    return Refused(RefillStatus::kWrongTenant, "caller is not a member of the identity's tenant");
  }
  if (retired_.count(id->tenant)) {
    return Refused(RefillStatus::kRetired, "tenant " + id->tenant + " is retired");
  }
  BlockAddress a = AddressOf(id.value());
  std::shared_ptr<const Keyring> keys = keys_->Get();

  auto loc = objects_.Get(LocatorKey(prefix_, a), kMaxLocatorBytes);
  if (!loc.ok()) return FromError(a, loc.error(), "locator");
  std::optional<Locator> l = DecodeLocator(loc.value());
  if (!l) return Missing(a, MissingReason::kMalformed, "locator does not decode");
  Range range;
  if (l->version == kLocatorVersion) {
    if (l->address != a) return SealRefused(a, SealCheck::kBadSeal, "locator names another block");
    SealCheck c = VerifyLocator(*keys, *l);
    if (c != SealCheck::kOk) return SealRefused(a, c, "locator");
    range = Range{l->object_digest, l->offset, l->length, l->checksum, l->identity_digest};
  } else {
    if (!accept_unsealed_) return SealRefused(a, SealCheck::kUnsealed, "v1 locator");
    RefillOutcome o = FetchLegacy(a, l->manifest_digest, *keys, range);
    if (o.reason != MissingReason::kNone) return o;
  }
  if (range.identity_digest != ComputeSha256(expected)) {
    return Missing(a, MissingReason::kIdentityMismatch, "packed under a different identity");
  }
  if (range.length > byte_budget) {
    return Missing(a, MissingReason::kOverBudget,
                   std::to_string(range.length) + " bytes > budget " + std::to_string(byte_budget));
  }
  auto bytes = objects_.GetRange(PackKey(prefix_, range.object_digest), range.offset, range.length);
  if (!bytes.ok()) {
    // A pack shorter than its locator says (the range starts or ends past its end) is a
    // damaged object, not an unavailable store: retrying will not help.
    const ObjectError& e = bytes.error();
    if (e.http_status == 416 || e.code == "InvalidRange" || e.code == "ShortRange") {
      return Missing(a, MissingReason::kCorrupt, "pack object is shorter than its locator says");
    }
    return FromError(a, e, "pack");
  }
  RefillOutcome o;
  o.address = a;
  o.payload_bytes_downloaded = bytes.value().size();
  if (bytes.value().size() != range.length || PayloadChecksum(bytes.value()) != range.checksum) {
    return Missing(a, MissingReason::kCorrupt, "payload does not match its checksum");
  }
  o.status = RefillStatus::kHit;
  o.payload = std::move(bytes.value());
  return o;
}

StatusCode CommitRefill(BlockStore& store, Owner owner, std::span<const uint8_t> identity,
                        std::span<const uint8_t> payload) {
  Result<CacheIdentity> id = DecodePhysicalKey(identity);
  if (!id.ok()) return StatusCode::kInvalidArgument;
  BlockAddress a = AddressOf(id.value());
  Result<ReservationId> r = store.Reserve(a, owner);
  if (!r.ok() && r.status() == StatusCode::kNotFound) {
    // The namespace directory went away with its last block; recreate it as an engine would.
    StatusCode c = store.CreateNamespace(a.tenant, a.ns, owner);
    if (c != StatusCode::kOk && c != StatusCode::kExists) return c;
    r = store.Reserve(a, owner);
  }
  if (!r.ok()) return r.status();
  ReservationId rid = r.value();
  StatusCode s = store.SetIdentity(rid, identity);
  if (s == StatusCode::kOk) s = store.OpenWriter(rid);
  if (s == StatusCode::kOk) {
    Result<size_t> w = store.Write(rid, 0, payload);
    if (!w.ok()) s = w.status();
    else if (w.value() != payload.size()) s = StatusCode::kIoError;
    store.CloseWriter(rid);
  }
  if (s == StatusCode::kOk) s = store.Commit(rid);
  if (s != StatusCode::kOk) store.Abort(rid);
  return s;
}

}  // namespace gpucache::cold
