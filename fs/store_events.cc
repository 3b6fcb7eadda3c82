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

namespace {

// What a file cut short says instead (BackingReadError::cut_short): the device is not to blame,
// and the block's next open sets it aside (FileMedium::OpenChecked checks the file's size, and
// StoreReads::OpenReader reports a header that does not check out as damage).
void LogBlockFileCutShort(const BackingReadError& e, const std::string& dir, uint64_t unlogged) {
  spdlog::warn(
      "block file cut short: {} (block {}, data directory {}) holds {} bytes, its block needs {}{}. "
      "gpucache never shortens a committed block file: something outside it truncated this one "
      "after it was opened. Not a device error: no need to isolate the data directory. Its readers "
      "hear EIO; the block stays in the namespace until its file is next checked (its next open), "
      "which finds it short, removes the block and moves the file to {}/damaged (deletes it if it "
      "cannot; a \"checksum mismatch\" line). Find what else writes in {}",
      Printable(e.where.file, 512), Printable(e.address.RelativePath(), 256), dir, e.cut_short->has,
      e.cut_short->needed,
      unlogged ? fmt::format(" ({} more such reads there not logged since the last line)", unlogged) : "",
      dir, dir);
}

}  // namespace

void LogBackingReadError(const BackingReadError& e) {
  // Every read of a failing device fails: a line or three per device, the rest counted. Keyed
  // by the directory's path, not its place in the list: two stores in one process (tests) keep
  // their own counts. Files cut short count apart: they must not hide a failing device's lines.
  static BurstLimiter limiter(3, std::chrono::minutes(1));
  static BurstLimiter cut_short_limiter(3, std::chrono::minutes(1));
  uint64_t unlogged = 0;
  const auto key = static_cast<uint32_t>(std::hash<std::string>{}(e.where.data_dir));
  if (!(e.cut_short ? cut_short_limiter : limiter).Allow(key, &unlogged)) return;
  const std::string dir = e.where.data_dir.empty() ? "(none: in memory)" : Printable(e.where.data_dir, 256);
  if (e.cut_short) return LogBlockFileCutShort(e, dir, unlogged);
  spdlog::warn(
      "backing read error: {} reading block {} (file {}) in data directory {}{}. The device may be "
      "failing: check its kernel log (dmesg) and SMART data; if it is, and another data directory is "
      "in service, take this one out with `gpucachectl isolate MNT {}` (its blocks become misses)",
      // The errno every reader of it hears: the device's own is in the kernel log, and the store
      // keeps none past its Env (StatusFromErrno; io_uring timeouts have none).
      control_protocol::ErrnoName(ToErrno(StatusCode::kIoError)), Printable(e.address.RelativePath(), 256),
      Printable(e.where.file, 512), dir,
      unlogged ? fmt::format(" ({} more read errors there not logged since the last line)", unlogged) : "",
      dir);
}

}  // namespace gpucache
