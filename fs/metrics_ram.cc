// The RAM tier's series (docs/metrics.md, "RAM tier"): machine-wide, no tenant and no path, so
// every reader of .gpucache/metrics sees them.
#include "fs/metrics.h"

namespace gpucache {

void RenderRamMetrics(MetricsWriter& w, const RamMetrics& ram) {
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const RamTierStats& t = ram.tier;
  const Series series[] = {
      {"gpucache_ram_passthrough", "gauge",
       "1 when the kernel serves opens of blocks in the RAM tier itself (FUSE passthrough).",
       ram.passthrough ? 1.0 : 0.0},
      {"gpucache_ram_budget_bytes", "gauge", "The RAM tier's size ([ram] bytes; 0: off).",
       double(t.budget_bytes)},
      {"gpucache_ram_bytes", "gauge", "Bytes of the verified copies the RAM tier holds (whole pages).",
       double(t.bytes_held)},
      {"gpucache_ram_dropped_open_bytes", "gauge",
       "Bytes of copies the RAM tier dropped that open passthrough files still hold: still on its "
       "tmpfs, and still counted against [ram] bytes until they close.",
       double(t.bytes_dropped_open)},
      {"gpucache_ram_copies", "gauge", "Verified block copies the RAM tier holds.", double(t.copies)},
      {"gpucache_ram_promotions_pending", "gauge", "Blocks queued for a copy or being copied.",
       double(ram.promotions_pending)},
      {"gpucache_ram_promotions_skipped_total", "counter",
       "Blocks not queued for a copy because the queue was full (their next open asks again).",
       double(ram.promotions_skipped)},
      {"gpucache_ram_promotions_skipped_memory_total", "counter",
       "Block copies not made because the machine's available memory would have fallen below the "
       "floor (1/32 of its memory, at least 256 MiB); the block is served from disk.",
       double(ram.promotions_skipped_memory)},
      {"gpucache_ram_promotions_total", "counter", "Block copies made and kept.", double(t.promotions)},
      {"gpucache_ram_page_drops_total", "counter",
       "Times the kernel was told to drop the pages daemon-served reads cached for a block now in RAM.",
       double(ram.page_drops)},
      {"gpucache_ram_too_large_total", "counter",
       "Copies not asked for because the block is larger than the whole tier: one per daemon-served "
       "release of such a block (and per commit of one, with promote = \"commit\").",
       double(t.too_large)},
      {"gpucache_ram_hits_total", "counter",
       "Opens served from a RAM copy, sharing an open inode's backing file or not (copies the kernel "
       "refused are not hits).",
       double(t.hits)},
      {"gpucache_ram_evictions_total", "counter", "Copies dropped from the RAM tier to make room.",
       double(t.evictions)},
      {"gpucache_ram_forgotten_total", "counter",
       "Copies dropped because their block left the namespace.", double(t.forgotten)},
      {"gpucache_ram_passthrough_opens_total", "counter",
       "Opens of committed blocks the kernel serves from a RAM copy.", double(ram.opens.passthrough_opens)},
      {"gpucache_ram_backing_files", "gauge", "RAM copies registered with the kernel now (one per open inode).",
       double(ram.opens.backing_files)},
      {"gpucache_ram_backing_refusals_total", "counter",
       "RAM copies the kernel refused as backing files (those opens were served by the daemon).",
       double(ram.opens.backing_refusals)},
  };
  for (const Series& s : series) {
    w.Family(s.name, s.type, s.help);
    w.Sample(s.name, "", s.value);
  }
  w.Family("gpucache_ram_promotion_failures_total", "counter",
           "Block copies begun and not kept, by why: checksum (damaged on disk), io, no_space (the "
           "tmpfs full), left (the block left while it was copied).");
  for (auto [reason, n] : {std::pair{"checksum", t.failed_by.checksum}, std::pair{"io", t.failed_by.io},
                           std::pair{"no_space", t.failed_by.no_space}, std::pair{"left", t.failed_by.left}}) {
    w.Sample("gpucache_ram_promotion_failures_total", std::string("reason=\"") + reason + "\"", double(n));
  }
  w.Family("gpucache_ram_open_handles", "gauge",
           "Open handles of committed blocks while passthrough is on, by who serves their reads.");
  w.Sample("gpucache_ram_open_handles", "served_by=\"kernel\"", double(ram.opens.passthrough_handles));
  w.Sample("gpucache_ram_open_handles", "served_by=\"daemon\"", double(ram.opens.daemon_handles));
}

}  // namespace gpucache
