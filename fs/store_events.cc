#include "fs/store_events.h"

#include <chrono>
#include <functional>
#include <string>

#include "common/control_protocol.h"
#include "common/printable.h"
#include "fs/errno_map.h"
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

void LogBackingReadError(const BlockAddress& address, const BlockLocation& where) {
  // Every read of a failing device fails: a line or three per device, the rest counted. Keyed
  // by the directory's path, not its place in the list: two stores in one process (tests) keep
  // their own counts.
  static BurstLimiter limiter(3, std::chrono::minutes(1));
  uint64_t unlogged = 0;
  if (!limiter.Allow(static_cast<uint32_t>(std::hash<std::string>{}(where.data_dir)), &unlogged)) return;
  const std::string dir = where.data_dir.empty() ? "(none: in memory)" : Printable(where.data_dir, 256);
  spdlog::warn(
      "backing read error: {} reading block {} (file {}) in data directory {}{}. The device may be "
      "failing: check its kernel log (dmesg) and SMART data; if it is, and another data directory is "
      "in service, take this one out with `gpucachectl isolate MNT {}` (its blocks become misses)",
      // The errno every reader of it hears: the device's own is in the kernel log, and the store
      // keeps none past its Env (StatusFromErrno; short files and io_uring timeouts have none).
      control_protocol::ErrnoName(ToErrno(StatusCode::kIoError)), Printable(address.RelativePath(), 256),
      Printable(where.file, 512), dir,
      unlogged ? fmt::format(" ({} more read errors there not logged since the last line)", unlogged) : "",
      dir);
}

}  // namespace gpucache
