// gpucachectl cold ...: the cold tier's operations (docs/gpucachectl.md, "cold").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gpucache::ctl {

struct ColdArgs {
  std::string mountpoint;
  std::string tenant;              // pack: only this tenant
  std::optional<uint64_t> budget;  // pack, refill: byte budget
  std::string identity_file;       // refill
  std::string manifest;            // reclaim, retain: 64 hex digits
  uint64_t job = 0;                // retry, drop
  uint64_t seconds = 0;            // retain
  uint64_t max_manifests = 100;    // purge-tenant: manifests per request
  std::string after;               // reseal: continue after this manifest key
  uint64_t older_than = 86400;     // sweep: minimum age of an orphan, seconds
  uint64_t max_deletes = 100;      // sweep: deletes per request
};

// `action`: pack, refill, report, failed, retry, drop, reclaim, drain, retain, reseal,
// purge-tenant, sweep.
// Exit codes as every command: 0 ok, 1 refill answered missing, 2 error, 64 bad usage; and
// 3 for a pack that did not complete (a job failed or is still pending, a pack was refused,
// or a listing failed so some blocks' state is unknown), a purge that did not complete, and a
// sweep that left an orphan older than its minimum age (one this node is still uploading).
int Cold(const std::string& action, const ColdArgs& args, bool json);

}  // namespace gpucache::ctl
