// ColdOps::PurgeTenant (cold/ops.h): a retired tenant's objects, deleted in bounded batches.
#include "cold/manifest.h"
#include "cold/ops.h"

namespace gpucache::cold {
namespace {

// Whether every entry of the manifest at `key` belongs to `tenant`; nullopt when the manifest
// cannot be read or decoded (it is then left alone: its references are unknown).
std::optional<bool> OnlyTenant(ObjectStore& objects, const std::string& key,
                               const std::string& tenant, std::optional<ObjectError>& error) {
  auto bytes = objects.Get(key, kMaxManifestBytes);
  if (!bytes.ok()) {
    if (bytes.error().kind != ObjectErrorKind::kNotFound) error = bytes.error();
    return std::nullopt;
  }
  DecodedManifest d = DecodeManifest(bytes.value());
  if (d.error != ManifestError::kNone) return std::nullopt;
  bool any = false, only = true;
  for (const ManifestEntry& e : d.manifest.entries) {
    any |= e.address.tenant == tenant;
    only &= e.address.tenant == tenant;
  }
  if (!any) return std::nullopt;  // not this tenant's: not our business
  return only;
}

}  // namespace

PurgeReport ColdOps::PurgeTenant(const std::string& tenant, size_t max_manifests,
                                 uint64_t now) const {
  PurgeReport p;
  if (!IsRetired(tenant)) {
    p.refused = true;
    p.reason = "tenant " + tenant + " is not in [cold] retired_tenants: only a retired tenant is purged";
    return p;
  }
  auto manifests = objects_.List(ManifestPrefix(prefix_));
  if (!manifests.ok()) {
    p.error = manifests.error();
    return p;
  }
  const Principal admin{.admin = true};
  size_t reclaimed = 0;
  bool more = false, retained = false, mixed = false;
  for (const ObjectMeta& m : manifests.value()) {
    std::optional<Sha256> digest = ManifestDigestOfKey(prefix_, m.key);
    if (!digest) continue;
    std::optional<bool> only = OnlyTenant(objects_, m.key, tenant, p.error);
    if (p.error) return p;
    if (!only) continue;
    if (!*only) {
      // Packs made before a pack held one tenant's blocks: the tenant's bytes stay in the
      // object, so the purge is not complete (docs/cold-tier.md says how to finish it).
      p.kept.push_back(m.key + ": also lists another tenant's blocks (reclaim it as an admin)");
      mixed = true;
      continue;
    }
    if (reclaimed == max_manifests) {
      more = true;
      break;
    }
    ReclaimReport r = Reclaim(*digest, now, admin);
    // The budget is of manifests reclaimed: counting refused ones (under retention, a seal no
    // key verifies) had every call spend it on the same first ones and stop before the rest.
    if (!r.refused) reclaimed++;
    p.deleted.insert(p.deleted.end(), r.deleted.begin(), r.deleted.end());
    for (const std::string& k : r.kept) p.kept.push_back(k);
    if (r.refused) p.kept.push_back(m.key + ": " + r.reason);
    retained |= r.refused;
    if (r.error) {
      p.error = r.error;
      return p;
    }
    if (!r.refused) p.manifests_deleted++;
  }
  if (more) return p;  // locators after the manifests: a rerun finds them
  // What is left: locators naming kept (mixed, retained) or missing manifests.
  auto locators = TenantLocators(tenant);
  if (!locators.ok()) {
    p.error = locators.error();
    return p;
  }
  for (const auto& [key, size] : locators.value()) {
    ReclaimReport r;
    if (!DeleteConfirmed(key, r)) {
      p.error = r.error;
      return p;
    }
    p.deleted.push_back(key);
    p.locators_deleted++;
  }
  p.complete = !retained && !mixed;  // a retained manifest is for a later run
  return p;
}

}  // namespace gpucache::cold
