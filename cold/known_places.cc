#include "cold/known_places.h"

namespace gpucache::cold {

// The relative path: tenant/namespace/block, all three names, so two tenants never share a key.
std::string KnownPlaces::KeyOf(const BlockAddress& a) { return a.RelativePath(); }

void KnownPlaces::Remember(const BlockAddress& a, const KnownPlace& place) {
  if (capacity_ == 0) return;
  MutexLock lock(mu_);
  auto [it, inserted] = places_.try_emplace(KeyOf(a));
  if (!inserted) {
    lru_.erase(it->second.lru);
  } else if (places_.size() > capacity_) {
    Erase(places_.find(*lru_.back()));
  }
  it->second.tenant = a.tenant;
  it->second.place = place;
  lru_.push_front(&it->first);
  it->second.lru = lru_.begin();
}

std::optional<KnownPlace> KnownPlaces::Find(const BlockAddress& a) {
  if (capacity_ == 0) return std::nullopt;
  MutexLock lock(mu_);
  auto it = places_.find(KeyOf(a));
  if (it == places_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.place;
}

void KnownPlaces::Forget(const BlockAddress& a) {
  MutexLock lock(mu_);
  auto it = places_.find(KeyOf(a));
  if (it != places_.end()) Erase(it);
}

void KnownPlaces::Erase(Map::iterator it) {
  lru_.erase(it->second.lru);
  places_.erase(it);
}

template <typename Pred>
size_t KnownPlaces::ForgetWhere(Pred pred) {
  MutexLock lock(mu_);
  size_t n = 0;
  for (auto it = places_.begin(); it != places_.end();) {
    auto next = std::next(it);
    if (pred(it->second)) Erase(it), n++;
    it = next;
  }
  return n;
}

size_t KnownPlaces::ForgetManifest(const Sha256& manifest) {
  return ForgetWhere([&](const Entry& e) { return e.place.manifest_digest == manifest; });
}

size_t KnownPlaces::ForgetTenant(const std::string& tenant) {
  return ForgetWhere([&](const Entry& e) { return e.tenant == tenant; });
}

size_t KnownPlaces::size() const {
  MutexLock lock(mu_);
  return places_.size();
}

}  // namespace gpucache::cold
