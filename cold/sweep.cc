// ColdOps::SweepOrphans (cold/ops.h): pack objects no manifest names, deleted once old enough.
//
// Why an age and not only the listing: a pack object goes up before its manifest (docs/
// cold-format.md, "Upload order"), so between the two steps every upload in flight anywhere is
// an object no manifest names yet. The sink puts an object again before its manifest when it
// went up more than SinkLimits::object_fresh_ms (10 minutes) ago (a job that waited in backoff
// or in the failed queue), so an object that a job will still name was always written less
// than that ago; the control request refuses a minimum age below an hour (cold/control.cc).
#include "cold/manifest.h"
#include "cold/ops.h"

namespace gpucache::cold {
namespace {

// The digest a pack key names, if `key` is one: "<prefix>packs/<64 hex>".
std::optional<Sha256> PackDigestOfKey(std::string_view prefix, std::string_view key) {
  const std::string packs = std::string(prefix) + "packs/";
  if (!key.starts_with(packs)) return std::nullopt;
  return Sha256FromHex(key.substr(packs.size()));
}

bool OldEnough(uint64_t modified, uint64_t now, uint64_t min_age) {
  return modified != 0 && modified <= now && now - modified >= min_age;
}

}  // namespace

ObjectResult<std::set<Sha256>> ColdOps::NamedObjects(std::set<std::string>& seen) const {
  auto keys = objects_.List(ManifestPrefix(prefix_));
  if (!keys.ok()) return keys.error();
  std::set<Sha256> named;
  for (const ObjectMeta& meta : keys.value()) {
    // A key that names no manifest is nothing a refill reaches: it names no object either.
    if (!ManifestDigestOfKey(prefix_, meta.key) || !seen.insert(meta.key).second) continue;
    auto bytes = objects_.Get(meta.key, kMaxManifestBytes);
    if (!bytes.ok()) {
      if (bytes.error().kind == ObjectErrorKind::kNotFound) continue;  // reclaimed meanwhile
      ObjectError e = bytes.error();
      e.message = meta.key + " cannot be read, so what it names is unknown: " + e.message;
      return e;
    }
    DecodedManifest d = DecodeManifest(bytes.value());
    if (d.error != ManifestError::kNone) {
      return ObjectError{ObjectErrorKind::kPermanent, 0, "UnknownReference",
                         meta.key + " is not a v3 or v4 manifest, so what it names is unknown "
                                    "(move or delete it by hand if it is garbage)"};
    }
    named.insert(d.manifest.object_digest);
  }
  return named;
}

SweepReport ColdOps::SweepOrphans(uint64_t now, uint64_t min_age, size_t max_deletes,
                                  const std::function<std::string(const std::string&)>& claim,
                                  const std::function<void(const std::string&)>& release) const {
  SweepReport r;
  auto packs = objects_.List(prefix_ + "packs/");
  if (!packs.ok()) {
    r.error = packs.error();
    return r;
  }
  std::set<std::string> seen;
  auto named = NamedObjects(seen);
  if (!named.ok()) {
    r.error = named.error();
    return r;
  }
  // Claimed as they are found, so that this node packs none of them again meanwhile (the same
  // blocks make the same object), and so that the bound counts only what may go: objects kept
  // (busy) used to fill it, and every call stopped at the same first ones (review, 2026-12-07).
  std::vector<ObjectMeta> claimed;
  for (const ObjectMeta& meta : packs.value()) {
    std::optional<Sha256> digest = PackDigestOfKey(prefix_, meta.key);
    if (!digest) continue;  // not a pack's key: nothing of ours
    r.packs_listed++;
    if (named.value().count(*digest)) {
      r.referenced++;
    } else if (meta.modified_unix_s == 0) {
      r.unknown_age++;
    } else if (!OldEnough(meta.modified_unix_s, now, min_age)) {
      r.young++;
    } else if (claimed.size() == max_deletes) {
      r.more = true;
    } else if (std::string why = claim ? claim(meta.key) : ""; !why.empty()) {
      r.busy++;
      r.kept.push_back(meta.key + ": " + why);
    } else {
      claimed.push_back(meta);
    }
  }
  // The manifests written since the first reading are read too.
  auto since = NamedObjects(seen);
  if (!since.ok()) r.error = since.error();
  for (const ObjectMeta& c : claimed) {
    if (r.error) break;
    if (since.value().count(*PackDigestOfKey(prefix_, c.key))) {
      r.referenced++;
      continue;
    }
    // Written again since the listing (the same bytes packed again, on another node): young.
    auto head = objects_.Head(c.key);
    if (!head.ok()) {
      if (head.error().kind != ObjectErrorKind::kNotFound) r.error = head.error();
      continue;
    }
    if (!OldEnough(head.value().modified_unix_s, now, min_age)) {
      r.young++;  // written again since the listing
      continue;
    }
    ReclaimReport one;
    if (!DeleteConfirmed(c.key, one)) {
      r.error = one.error;
      break;
    }
    r.deleted.push_back(c.key);
    r.bytes_deleted += c.size;
  }
  if (release) {
    for (const ObjectMeta& c : claimed) release(c.key);
  }
  r.complete = !r.more && !r.error && r.busy == 0 && r.unknown_age == 0;
  return r;
}

}  // namespace gpucache::cold
