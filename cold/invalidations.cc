#include "cold/invalidations.h"

namespace gpucache::cold {

bool PendingInvalidations::Add(const BlockAddress& a, const PayloadXxh128& checksum) {
  MutexLock lock(mu_);
  if (pending_.size() >= capacity_ && !pending_.count({a, checksum})) {
    overflow_++;
    return false;
  }
  pending_.insert({a, checksum});
  return true;
}

bool PendingInvalidations::Refuses(const BlockAddress& a, const PayloadXxh128& checksum) const {
  MutexLock lock(mu_);
  return pending_.count({a, checksum}) > 0;
}

std::vector<PendingInvalidations::Entry> PendingInvalidations::Snapshot() const {
  MutexLock lock(mu_);
  return {pending_.begin(), pending_.end()};
}

void PendingInvalidations::Remove(const Entry& e) {
  MutexLock lock(mu_);
  pending_.erase(e);
}

size_t PendingInvalidations::size() const {
  MutexLock lock(mu_);
  return pending_.size();
}

uint64_t PendingInvalidations::overflow() const {
  MutexLock lock(mu_);
  return overflow_;
}

}  // namespace gpucache::cold
