// FileStore's medium state of a committed block: which data directory holds it. Shared by the
// FileStore sources (file_store.cc, file_store_snapshot.cc); not part of the store's API.
#pragma once

#include <cstddef>
#include <memory>

#include "store/indexed_store.h"

namespace gpucache {

class Located final : public StoredPayload {
 public:
  explicit Located(size_t d) : dev(d) {}
  const size_t dev;
};

inline size_t DeviceOf(const StoredPayload* stored) {
  auto* l = dynamic_cast<const Located*>(stored);
  return l ? l->dev : 0;
}
inline size_t DeviceOf(const std::shared_ptr<StoredPayload>& stored) {
  return DeviceOf(stored.get());
}

}  // namespace gpucache
