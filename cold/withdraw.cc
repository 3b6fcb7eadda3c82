// ColdOps::WithdrawLocator (cold/ops.h): the cold copy of a block the engine invalidated.
#include "cold/locator.h"
#include "cold/manifest.h"
#include "cold/ops.h"

namespace gpucache::cold {

ObjectResult<bool> ColdOps::WithdrawLocator(const BlockAddress& a, const PayloadXxh128& checksum) const {
  const std::string key = LocatorKey(prefix_, a);
  // The sink's PUT of a newer locator holds the same lock: it lands before the read (and is
  // kept for naming other bytes) or after the delete (LocatorLocks).
  MutexLock locator(locks_->For(key));
  auto bytes = objects_.Get(key, kMaxLocatorBytes);
  if (!bytes.ok()) {
    if (bytes.error().kind == ObjectErrorKind::kNotFound) return false;
    return bytes.error();
  }
  std::optional<Locator> l = DecodeLocator(bytes.value());
  // A locator that does not decode names nothing a refill would serve: left alone. One of
  // another block (copied under this key) is refused by refill as bad-seal: left alone too.
  if (!l || (l->version != 1 && (l->address != a || l->checksum != checksum))) return false;
  ReclaimReport r;
  if (!DeleteConfirmed(key, r)) return *r.error;
  return true;
}

}  // namespace gpucache::cold
