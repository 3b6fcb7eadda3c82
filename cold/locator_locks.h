// LocatorLocks: serializes, within one daemon, every read-decide-write of a block's locator
// against the sink's upload of a new locator for the same block (docs/cold-tier.md, "Key
// rotation").
//
// Reseal reads a locator, re-seals it and PUTs it back; reclaim reads one and DELETEs it if it
// still names the manifest being reclaimed. Without a lock, the sink could PUT a newer locator
// for the same block between the read and the write, and the write would replace it with the
// re-sealed older one (reseal) or remove it (reclaim). Holding the key's lock across the read
// and the write, and across the sink's PUT, orders them: the sink's PUT lands either before
// the read (which then sees the newer locator and leaves it) or after the write (and wins).
//
// Striped: a fixed number of mutexes chosen by a hash of the locator key, so memory stays
// bounded and unrelated keys rarely wait on each other. A holder keeps one stripe at a time
// and does object store I/O under it (one or two requests), never while holding another lock
// of the tier. Across daemons nothing is serialized (see the docs).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <functional>
#include <mutex>
#include <string_view>

#include "store/mutex.h"

namespace gpucache::cold {

class LocatorLocks {
 public:
  // The lock of `locator_key`; hold it with a MutexLock.
  Mutex& For(std::string_view locator_key) {
    return stripes_[std::hash<std::string_view>{}(locator_key) % stripes_.size()];
  }

 private:
  std::array<Mutex, 64> stripes_;
};

}  // namespace gpucache::cold
