#include "cold/refill.h"

#include "cold/known_places.h"
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
    case MissingReason::kInvalidated: return "invalidated";
  }
  return "?";
}

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
                                    PayloadRange& out) const {
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
    out = PayloadRange{d.manifest.object_digest, e.offset, e.length, e.checksum, e.identity_digest};
    return Missing(a, MissingReason::kNone, "");
  }
  return Missing(a, MissingReason::kAbsent, "manifest does not list the block");
}

std::optional<CacheIdentity> Refiller::Admit(const Principal& who, std::span<const uint8_t> expected,
                                             LocatedBlock& out) const {
  Result<CacheIdentity> id = DecodePhysicalKey(expected);
  if (!id.ok()) {
    out.outcome = Refused(RefillStatus::kInvalid, "identity is not a valid GPCK");
  } else if (!who.MayActFor(id->tenant)) {
    out.outcome = Refused(RefillStatus::kWrongTenant, "caller is not a member of the identity's tenant");
  } else if (retired_.count(id->tenant)) {
    out.outcome = Refused(RefillStatus::kRetired, "tenant " + id->tenant + " is retired");
  } else {
    return std::move(id.value());
  }
  return std::nullopt;
}

void Refiller::CheckRange(std::span<const uint8_t> expected, uint64_t byte_budget, LocatedBlock& out) const {
  const BlockAddress& a = out.outcome.address;
  if (out.range.identity_digest != ComputeSha256(expected)) {
    out.outcome = Missing(a, MissingReason::kIdentityMismatch, "packed under a different identity");
  } else if (out.range.length > byte_budget) {
    out.outcome = Missing(a, MissingReason::kOverBudget, std::to_string(out.range.length) +
                                                         " bytes > budget " + std::to_string(byte_budget));
  } else {
    out.outcome.status = RefillStatus::kHit;
  }
}

LocatedBlock Refiller::LocateKnown(const Principal& who, std::span<const uint8_t> expected,
                                   uint64_t byte_budget, KnownPlaces& known) const {
  LocatedBlock out;
  std::optional<CacheIdentity> id = Admit(who, expected, out);
  if (!id) return out;
  BlockAddress a = AddressOf(*id);
  out.outcome = Missing(a, MissingReason::kAbsent, "no known place");
  std::optional<KnownPlace> place = known.Find(a);
  if (!place) return out;
  out.range = place->range;
  out.manifest = place->manifest_digest;
  out.known = true;
  out.outcome = RefillOutcome{};
  out.outcome.address = a;
  CheckRange(expected, byte_budget, out);
  if (!out.ready()) out.outcome = Missing(a, MissingReason::kAbsent, "known place does not fit");
  return out;
}

LocatedBlock Refiller::Locate(const Principal& who, std::span<const uint8_t> expected,
                              uint64_t byte_budget) const {
  LocatedBlock out;
  auto missing = [&](RefillOutcome o) {
    out.outcome = std::move(o);
    return out;
  };
  std::optional<CacheIdentity> id = Admit(who, expected, out);
  if (!id) return out;
  BlockAddress a = AddressOf(*id);
  std::shared_ptr<const Keyring> keys = keys_->Get();

  auto loc = objects_.Get(LocatorKey(prefix_, a), kMaxLocatorBytes);
  if (!loc.ok()) return missing(FromError(a, loc.error(), "locator"));
  std::optional<Locator> l = DecodeLocator(loc.value());
  if (!l) return missing(Missing(a, MissingReason::kMalformed, "locator does not decode"));
  PayloadRange& range = out.range;
  if (l->version == kLocatorVersion) {
    if (l->address != a) return missing(SealRefused(a, SealCheck::kBadSeal, "locator names another block"));
    SealCheck c = VerifyLocator(*keys, *l);
    if (c != SealCheck::kOk) return missing(SealRefused(a, c, "locator"));
    range = PayloadRange{l->object_digest, l->offset, l->length, l->checksum, l->identity_digest};
    out.sealed = true;
  } else {
    if (!accept_unsealed_) return missing(SealRefused(a, SealCheck::kUnsealed, "v1 locator"));
    RefillOutcome o = FetchLegacy(a, l->manifest_digest, *keys, range);
    if (o.reason != MissingReason::kNone) return missing(std::move(o));
  }
  out.manifest = l->manifest_digest;
  out.outcome.address = a;
  CheckRange(expected, byte_budget, out);
  return out;
}

RefillOutcome Refiller::Stream(const LocatedBlock& block, const ObjectStore::RangeSink& sink) const {
  const PayloadRange& range = block.range;
  const BlockAddress& a = block.outcome.address;
  // Every byte handed to `sink` is hashed, in order; a resent request starts again at 0.
  PayloadChecksummer sum;
  uint64_t fed = 0;
  bool refused = false;
  auto hashing = [&](uint64_t offset, std::span<const uint8_t> bytes) {
    if (offset == 0 && fed != 0) sum.Reset(), fed = 0;
    if (offset != fed || !sink(offset, bytes)) return refused = true, false;
    sum.Update(bytes);
    fed += bytes.size();
    return true;
  };
  auto got = objects_.GetRangeInto(PackKey(prefix_, range.object_digest), range.offset, range.length, hashing);
  if (refused) return Missing(a, MissingReason::kUnavailable, "aborted: the receiver refused the bytes");
  if (!got.ok()) {
    // A pack shorter than its locator says (the range starts or ends past its end) is a
    // damaged object, not an unavailable store: retrying will not help.
    const ObjectError& e = got.error();
    if (e.http_status == 416 || e.code == "InvalidRange" || e.code == "ShortRange") {
      return Missing(a, MissingReason::kCorrupt, "pack object is shorter than its locator says");
    }
    return FromError(a, e, "pack");
  }
  if (fed != range.length || sum.Finish() != range.checksum) {
    return Missing(a, MissingReason::kCorrupt, "payload does not match its checksum");
  }
  RefillOutcome o;
  o.status = RefillStatus::kHit;
  o.address = a;
  o.payload_bytes_downloaded = fed;
  return o;
}

RefillOutcome Refiller::Buffer(const LocatedBlock& block) const {
  std::vector<uint8_t> payload;
  payload.reserve(block.range.length);
  RefillOutcome o = Stream(block, [&](uint64_t offset, std::span<const uint8_t> bytes) {
    payload.resize(offset);  // a resent request starts again at 0
    payload.insert(payload.end(), bytes.begin(), bytes.end());
    return true;
  });
  if (o.status == RefillStatus::kHit) o.payload = std::move(payload);
  return o;
}

RefillOutcome Refiller::Fetch(const Principal& who, std::span<const uint8_t> expected,
                              uint64_t byte_budget) const {
  LocatedBlock block = Locate(who, expected, byte_budget);
  if (!block.ready()) return block.outcome;
  return Buffer(block);
}

Result<ReservationId> BeginRefill(BlockFills& store, Owner owner, std::span<const uint8_t> identity) {
  Result<CacheIdentity> id = DecodePhysicalKey(identity);
  if (!id.ok()) return StatusCode::kInvalidArgument;
  BlockAddress a = AddressOf(id.value());
  // The refill writes the fill itself: its owner's `.part` may not add bytes to it.
  Result<ReservationId> r = store.ReserveForDaemon(a, owner);
  if (!r.ok() && r.status() == StatusCode::kNotFound) {
    // The namespace directory went away with its last block; recreate it as an engine would.
    StatusCode c = store.CreateNamespace(a.tenant, a.ns, owner);
    if (c != StatusCode::kOk && c != StatusCode::kExists) return c;
    r = store.ReserveForDaemon(a, owner);
  }
  if (!r.ok()) return r.status();
  ReservationId rid = r.value();
  StatusCode s = store.SetIdentity(rid, identity);
  if (s == StatusCode::kOk) s = store.OpenWriter(rid);
  if (s != StatusCode::kOk) {
    store.Abort(rid);
    return s;
  }
  return rid;
}

StatusCode FinishRefill(BlockFills& store, ReservationId rid, bool verified) {
  store.CloseWriter(rid);
  StatusCode s = verified ? store.Commit(rid) : StatusCode::kChecksumMismatch;
  if (s != StatusCode::kOk) store.Abort(rid);
  return s;
}

StatusCode CommitRefill(BlockFills& store, Owner owner, std::span<const uint8_t> identity,
                        std::span<const uint8_t> payload) {
  Result<ReservationId> rid = BeginRefill(store, owner, identity);
  if (!rid.ok()) return rid.status();
  Result<size_t> w = store.Write(rid.value(), 0, payload);
  bool written = w.ok() && w.value() == payload.size();
  StatusCode s = FinishRefill(store, rid.value(), written);
  if (!written) return w.ok() ? StatusCode::kIoError : w.status();
  return s;
}

}  // namespace gpucache::cold
