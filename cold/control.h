// The cold tier's control requests: "cold.*" ops on <mountpoint>/.gpucache/ctl
// (docs/control-protocol.md, "Cold tier"). The daemon's main registers HandleColdRequest as a
// control extension; fs/ authenticates the caller, this file authorizes each op:
//   cold.refill   a member of the identity's tenant, or an admin ("async": true returns an
//                 op id at once; the refill runs on the tier's refill workers)
//   cold.op       the caller that submitted the op (or an admin): "running" or its reply
//   cold.pack     an admin, or a member of the named tenant
//   cold.reclaim  an owner of every tenant in the manifest, or an admin
//   cold.report, cold.failed, cold.retry, cold.drop, cold.drain, cold.retain, cold.reseal,
//   cold.purge_tenant, cold.sweep: admins
// Replies are one JSON object and a newline: "ok": true, or "ok": false with "errno" and
// "error", like every other control reply. Input is hostile: every field is type-checked.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "cold/tier.h"

namespace gpucache::cold {

// `who` is established (common/principal.h): its admin flag and tenants decide.
std::string HandleColdRequest(ColdTier& tier, const Principal& who, std::string_view request);

// Prometheus text for the tier's counters (appended to the daemon's /metrics).
std::string RenderColdMetrics(const ColdTierStats& s);

}  // namespace gpucache::cold
