#include "fs/store_events.h"

#include <chrono>

#include "fs/log.h"

namespace gpucache {

void LogAutomaticFence(const AutomaticFence& fence) {
  // An epoch lasts about 4 billion fills: more than one a minute means something else is wrong,
  // and the metric (gpucache_automatic_fences_total) counts every one.
  static LogLimiter limiter(std::chrono::minutes(1));
  if (!limiter.Allow()) return;
  const uint64_t unlogged = limiter.Suppressed();
  spdlog::warn(
      "automatic fence: epoch {} gave out its {} region ids, so the daemon fenced itself into epoch {} "
      "(as gpucachectl fence would); {} fill(s) open then hear ESTALE and must be written again{}. "
      "Nothing to repair: clients retry their fills; blocks quarantined before it can be freed with "
      "`gpucachectl reclaim MNT --fenced {}`",
      fence.from_epoch, fence.region_ids_per_epoch, fence.epoch, fence.fills_fenced,
      unlogged ? fmt::format(" ({} more automatic fence(s) since the last such line)", unlogged) : "",
      fence.epoch);
}

}  // namespace gpucache
