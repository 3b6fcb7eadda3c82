// ColdOps::Reseal: moving sealed objects to the keyring's current key (docs/cold-tier.md,
// "Key rotation"). A manifest keeps its key when re-sealed (the key is the digest of its body),
// so locators and retention records that name it stay valid; each locator is re-sealed where
// it still names this manifest (a newer pack's locator belongs to that pack's manifest).
#include <algorithm>

#include "cold/locator.h"
#include "cold/manifest.h"
#include "cold/ops.h"

namespace gpucache::cold {
namespace {

bool AllCurrent(const Manifest& m, const Keyring& keys) {
  for (const TenantSeal& s : m.seals) {
    if (s.seal.key_id != keys.current()) return false;
  }
  return true;
}

}  // namespace

void ColdOps::ResealLocators(const Manifest& m, const Sha256& digest, const Keyring& keys,
                             ResealReport& r) const {
  for (const ManifestEntry& e : m.entries) {
    ResealLocator(LocatorKey(prefix_, e.address), digest, keys, r);
    if (r.error) return;
  }
}

// The read and the write hold the key's lock, which the sink's locator PUT holds too: a newer
// locator the sink uploads for this block lands before the read (and is left alone: it names
// another manifest) or after the write (and replaces the re-sealed older one).
void ColdOps::ResealLocator(const std::string& key, const Sha256& digest, const Keyring& keys,
                            ResealReport& r) const {
  MutexLock locator(locks_->For(key));
  auto bytes = objects_.Get(key, kMaxLocatorBytes);
  if (!bytes.ok()) {
    if (bytes.error().kind != ObjectErrorKind::kNotFound) r.error = bytes.error();
    return;
  }
  r.bytes += bytes.value().size();
  std::optional<Locator> l = DecodeLocator(bytes.value());
  if (!l || l->version != kLocatorVersion || l->manifest_digest != digest) return;
  if (SealCheck c = VerifyLocator(keys, *l); c != SealCheck::kOk) {
    r.refused.push_back(key + ": " + std::string(ToString(c)));
    return;
  }
  if (l->seal.key_id == keys.current()) {
    r.locators_current++;
    return;
  }
  SealLocator(*l, keys);
  std::vector<uint8_t> sealed = EncodeLocator(*l);
  auto put = objects_.Put(key, sealed);
  if (!put.ok()) {
    r.error = put.error();
    return;
  }
  r.bytes += sealed.size();
  r.locators_resealed++;
}

ResealReport ColdOps::Reseal(uint64_t byte_budget, const std::string& after) const {
  ResealReport r;
  std::shared_ptr<const Keyring> keys = keys_->Get();
  auto list = objects_.List(ManifestPrefix(prefix_));
  if (!list.ok()) {
    r.error = list.error();
    return r;
  }
  std::vector<ObjectMeta> manifests = std::move(list.value());
  std::sort(manifests.begin(), manifests.end(),
            [](const ObjectMeta& a, const ObjectMeta& b) { return a.key < b.key; });
  std::string last = after;
  for (const ObjectMeta& meta : manifests) {
    if (!after.empty() && meta.key <= after) continue;
    if (r.bytes >= byte_budget) {
      r.budget_reached = true;
      r.resume_after = last;
      return r;
    }
    r.manifests_scanned++;
    auto bytes = objects_.Get(meta.key, kMaxManifestBytes);
    if (!bytes.ok()) {
      r.error = bytes.error();
      r.resume_after = last;
      return r;
    }
    r.bytes += bytes.value().size();
    DecodedManifest d = DecodeManifest(bytes.value());
    std::optional<Sha256> digest = ManifestDigestOfKey(prefix_, meta.key);
    if (d.error != ManifestError::kNone || !digest || d.body_digest != *digest) {
      r.refused.push_back(meta.key + ": malformed or not matching its key");
      last = meta.key;
      continue;
    }
    SealCheck c = VerifyManifest(*keys, d.manifest);
    if (c != SealCheck::kOk) {
      r.refused.push_back(meta.key + ": " + std::string(ToString(c)));
      last = meta.key;
      continue;
    }
    if (AllCurrent(d.manifest, *keys)) {
      r.manifests_current++;
    } else {
      SealManifest(d.manifest, *keys);
      std::vector<uint8_t> sealed = EncodeManifest(d.manifest);
      auto put = objects_.Put(meta.key, sealed);
      if (!put.ok()) {
        r.error = put.error();
        r.resume_after = last;
        return r;
      }
      r.bytes += sealed.size();
      r.manifests_resealed++;
    }
    ResealLocators(d.manifest, *digest, *keys, r);
    if (r.error) {
      r.resume_after = last;  // this manifest's locators are not all done: walk it again
      return r;
    }
    last = meta.key;
  }
  return r;
}

}  // namespace gpucache::cold
