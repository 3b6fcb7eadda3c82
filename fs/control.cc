#include "fs/control.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/control_protocol.h"
#include "common/printable.h"
#include "fs/errno_map.h"
#include "fs/log.h"

namespace gpucache {
namespace {

using nlohmann::json;

using control_protocol::Error;
using control_protocol::kNotAdmin;
using control_protocol::Number;
using control_protocol::Ok;

// A store refusal: its errno from the one map (fs/errno_map.cc), its status named in the text.
std::string Error(StatusCode code, const std::string& message) {
  return Error(ToErrno(code), message + ": " + std::string(ToString(code)));
}

// Ordered: the stats file lists the counters in this order, holdings first.
nlohmann::ordered_json CountersJson(const TenantCounters& t) {
  const Usage& u = t.usage;
  return nlohmann::ordered_json{{"blocks", u.blocks},
              {"bytes", u.bytes},
              {"reservations", u.reservations},
              {"open_blocks", u.open_readers},
              {"inflight_bytes", u.inflight_bytes},
              {"quarantined_blocks", u.quarantined_blocks},
              {"quarantined_bytes", u.quarantined_bytes},
              {"hits", t.hits},
              {"prefix_hits", t.prefix_hits},
              {"misses", t.misses},
              {"commits", t.commits},
              {"checksum_failures", t.checksum_failures},
              {"evictions", t.evictions},
              {"invalidations", t.invalidations},
              {"quarantined", t.quarantined},
              {"reclaimed", t.reclaimed},
              {"fenced", t.fenced},
              {"expired", t.expired}};
}

json QuarantineJson(const QuarantineInfo& q) {
  return json{{"region", q.region_id}, {"path", q.address.RelativePath()}, {"bytes", q.size},
              {"reason", q.reason}, {"since_epoch", q.since_epoch}, {"open_handles", q.open_handles}};
}

// "tenant/namespace/block" from a request, checked for shape.
std::optional<BlockAddress> ParsePath(const json& req) {
  if (!req.contains("path") || !req["path"].is_string()) return std::nullopt;
  std::string p = req["path"];
  auto a = p.find('/'), b = p.find('/', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos) return std::nullopt;
  BlockAddress addr{p.substr(0, a), p.substr(a + 1, b - a - 1), p.substr(b + 1)};
  if (!IsValidTenantName(addr.tenant) || !IsValidNamespaceName(addr.ns) ||
      !IsValidBlockName(addr.block)) {
    return std::nullopt;
  }
  return addr;
}

// The refusal of a "path" that is missing or not TENANT/NAMESPACE/BLOCK, naming what was given.
std::string BadPath(const std::string& op, const json& req) {
  std::string given = "no \"path\"";
  if (req.contains("path")) {
    const json& p = req["path"];
    given = p.is_string() ? "\"" + Printable(p.get<std::string>(), 512) + "\""
                          : "a " + std::string(p.type_name());
  }
  return Error(EINVAL, op + " needs \"path\": \"TENANT/NAMESPACE/BLOCK\" (a block path relative "
                         "to the mount); it was given " + given);
}

constexpr char kNotMember[] = "caller is not a member of the block's tenant";

}  // namespace

std::vector<std::string> ControlPlane::ShownTenants(const Principal& c, const StoreStats& stats) const {
  std::vector<std::string> shown;
  for (const TenantConfig& t : access_.tenants()) {
    if (access_.MayUseTenant(c, t.name)) shown.push_back(t.name);
  }
  if (!access_.IsAdmin(c)) return shown;
  // Removed tenants whose blocks are still held, for admins (they still take room).
  for (const auto& [name, counters] : stats.tenants) {
    const Usage& u = counters.usage;
    if (!access_.IsTenant(name) && u.blocks + u.quarantined_blocks + u.reservations != 0) shown.push_back(name);
  }
  return shown;
}

std::string ControlPlane::StatsText(const Principal& c) {
  StoreStats stats = store_.Stats();
  std::ostringstream out;
  out << "epoch " << stats.epoch << (stats.draining ? " draining" : "") << "\n";
  for (const std::string& t : ShownTenants(c, stats)) {
    out << "tenant=" << t;
    nlohmann::ordered_json counters = CountersJson(stats.tenants[t]);
    for (auto& [k, v] : counters.items()) out << " " << k << "=" << v;
    if (!access_.IsTenant(t)) out << " removed=1";
    out << "\n";
  }
  return out.str();
}

void ControlPlane::AddExtension(std::string prefix, ControlExtension extension) {
  extensions_.emplace_back(std::move(prefix), std::move(extension));
}

std::string ControlPlane::EpochText() { return std::to_string(store_.Epoch()) + "\n"; }

std::string ControlPlane::QuarantineText(const Principal& c) {
  std::ostringstream out;
  for (const QuarantineInfo& q : store_.ListQuarantine()) {
    if (!access_.MayAdminister(c, q.address.tenant)) continue;
    out << "region=" << q.region_id << " path=" << q.address.RelativePath() << " bytes=" << q.size
        << " reason=" << q.reason << " since_epoch=" << q.since_epoch
        << " open_handles=" << q.open_handles << "\n";
  }
  return out.str();
}

// Requests that change something: admin actions, pins and the cold tier's operations. Each
// is logged with who asked and the outcome, refusals included. Reads (lookup, status, cold
// report and failed) are not; refills, a data path, only at debug level.
enum class ActionLog : uint8_t { kNone, kInfo, kDebug };
ActionLog LogLevelOf(const std::string& op) {
  static const char* const kActions[] = {"fence", "reclaim", "drain", "evict", "pin", "unpin",
                                         "isolate", "cold.pack", "cold.reclaim", "cold.retry",
                                         "cold.drop", "cold.drain", "cold.retain",
                                         "cold.reseal", "cold.purge_tenant"};
  for (const char* a : kActions) {
    if (op == a) return ActionLog::kInfo;
  }
  return op == "cold.refill" ? ActionLog::kDebug : ActionLog::kNone;
}

std::string ControlPlane::Handle(const Principal& c, std::string_view request) {
  json req = json::parse(request, nullptr, /*allow_exceptions=*/false);
  std::string reply;
  try {
    reply = Dispatch(c, req, request);
  } catch (const json::exception& e) {
    // A field of a type its handler did not check for: refused, never the daemon's end (each
    // handler checks what it changes state on before changing it; this is the net under them).
    reply = Error(EINVAL, std::string("malformed request: ") + e.what());
  } catch (const std::exception& e) {
    // Anything else a handler throws (out of memory, a bug) fails this request, not the
    // daemon: it would otherwise unwind into libfuse's C frames and terminate the process.
    spdlog::error("control: a request failed: {}", e.what());
    reply = Error(EIO, std::string("the request failed: ") + e.what());
  }
  if (!req.is_object() || !req.contains("op") || !req["op"].is_string()) return reply;
  ActionLog level = LogLevelOf(req["op"].get<std::string>());
  if (level == ActionLog::kNone) return reply;
  if (level == ActionLog::kInfo && !MayLogActionOf(c)) return reply;
  // The request as JSON (control characters escaped, at most 512 bytes), the reply as sent.
  std::string what = control_protocol::Json(req).substr(0, 512);
  std::string outcome = reply.substr(0, reply.find_last_not_of('\n') + 1);
  spdlog::log(level == ActionLog::kInfo ? spdlog::level::info : spdlog::level::debug,
              "control: uid {} gid {} asked {} -> {}", c.uid, c.gid, what, outcome);
  return reply;
}

bool ControlPlane::MayLogActionOf(const Principal& c) {
  if (access_.Establish(c).admin) return true;
  uint64_t suppressed = 0;
  if (!action_log_.Allow(c.uid, &suppressed)) return false;
  if (suppressed > 0) {
    spdlog::info("control: uid {}: {} more actions not logged (at most 10 lines a second; "
                 "gpucache_log_lines_suppressed_total counts them)", c.uid, suppressed);
  }
  return true;
}

bool ControlPlane::AnswersOnRead(std::string_view request) {
  return control_protocol::AnswersOnRead(json::parse(request, nullptr, /*allow_exceptions=*/false));
}

std::string ControlPlane::Dispatch(const Principal& c, const json& req, std::string_view request) {
  if (req.is_discarded() || !req.is_object()) {
    return Error(EINVAL, "request is not a JSON object");
  }
  if (!req.contains("op") || !req["op"].is_string()) {
    return Error(EINVAL, "request needs a string field \"op\"");
  }
  std::string op = req["op"];
  if (op == "lookup") return Lookup(c, req);
  if (op == "status") return Status(c);
  if (op == "quarantine") return Quarantine(c);
  if (op == "fence") return Fence(c);
  if (op == "reclaim") return Reclaim(c, req);
  if (op == "drain") return Drain(c, req);
  if (op == "evict") return Evict(c, req);
  if (op == "pin") return Pin(c, req, true);
  if (op == "unpin") return Pin(c, req, false);
  if (op == "isolate") return Isolate(c, req);
  for (const auto& [prefix, extension] : extensions_) {
    if (op.rfind(prefix, 0) != 0) continue;
    return extension(access_.Establish(c), request);
  }
  // Without [cold] enabled = true the daemon registers no cold.* extension: say so, rather
  // than "unknown op", to whoever typed `gpucachectl cold ...`.
  if (op.rfind("cold.", 0) == 0) {
    return Error(ENOTSUP, "the cold tier is not enabled on this mount (set [cold] enabled = "
                            "true in the configuration; docs/cold-tier.md)");
  }
  return Error(EINVAL, "unknown op '" + Printable(op) +
                             "' (known: lookup, status, quarantine, fence, reclaim, drain, evict, "
                             "pin, unpin, isolate)");
}

std::string ControlPlane::Lookup(const Principal& c, const json& req) {
  if (!req.contains("identity") || !req["identity"].is_string()) {
    return Error(EINVAL, "lookup needs \"identity\": the hex of the canonical identity (GPCK)");
  }
  auto bytes = HexDecode(req["identity"].get<std::string>());
  if (!bytes) return Error(EINVAL, "identity is not hex");
  Result<CacheIdentity> id = DecodePhysicalKey(*bytes);
  if (!id.ok()) return Error(EINVAL, "identity does not decode as a valid GPCK v1");
  if (!access_.MayUseTenant(c, id->tenant)) {
    return Error(EACCES, "caller is not a member of the identity's tenant");
  }
  LookupResult r = store_.Lookup(id.value());
  json reply{{"result", ToString(r.kind)}};
  if (r.kind == LookupResult::Kind::kMiss) {
    reply["reason"] = ToString(r.reason);
  } else {
    reply["path"] = r.address.RelativePath();
    reply["valid_length"] = r.valid_length;
  }
  return Ok(reply);
}

std::string ControlPlane::Status(const Principal& c) {
  StoreStats stats = store_.Stats();
  json tenants = json::object();
  for (const std::string& t : ShownTenants(c, stats)) {
    tenants[t] = CountersJson(stats.tenants[t]);
    if (!access_.IsTenant(t)) tenants[t]["removed"] = true;
  }
  json reply{{"epoch", stats.epoch}, {"draining", stats.draining}, {"tenants", tenants}};
  if (access_.IsAdmin(c)) {  // device paths are the operator's business
    reply["data_dirs"] = json::array();
    for (const DomainInfo& d : store_.Domains()) {
      reply["data_dirs"].push_back({{"path", d.path}, {"isolated", d.isolated}});
    }
  }
  return Ok(reply);
}

std::string ControlPlane::Quarantine(const Principal& c) {
  json list = json::array();
  for (const QuarantineInfo& q : store_.ListQuarantine()) {
    if (access_.MayAdminister(c, q.address.tenant)) list.push_back(QuarantineJson(q));
  }
  return Ok({{"quarantine", list}});
}

std::string ControlPlane::Fence(const Principal& c) {
  if (!access_.IsAdmin(c)) return Error(EACCES, kNotAdmin);
  Result<uint64_t> epoch = store_.Fence();
  if (!epoch.ok()) return Error(epoch.status(), "the new epoch could not be persisted");
  return Ok({{"epoch", epoch.value()}});
}

std::string ControlPlane::Reclaim(const Principal& c, const json& req) {
  if (auto epoch = Number(req, "fenced")) {
    if (!access_.IsAdmin(c)) return Error(EACCES, kNotAdmin);
    Result<uint64_t> n = store_.ReclaimFenced(*epoch);
    if (!n.ok()) {
      return Error(n.status(), "reclaim --fenced needs the current epoch, " +
                                   std::to_string(store_.Epoch()) + ", after a fence");
    }
    return Ok({{"reclaimed", n.value()}, {"epoch", *epoch}});
  }
  if (auto region = Number(req, "drained")) {
    Result<QuarantineInfo> q = store_.StatQuarantine(*region);
    // Not found and not yours look the same: a region id says nothing about other tenants.
    if (!q.ok() || !access_.MayAdminister(c, q->address.tenant)) {
      return Error(ENOENT, "no quarantined region " + std::to_string(*region) + " of yours");
    }
    StatusCode s = store_.ReclaimDrained(*region);
    if (s != StatusCode::kOk) return Error(s, "the daemon still has a handle open on it");
    return Ok({{"reclaimed", 1}, {"region", *region}});
  }
  return Error(EINVAL, "reclaim needs \"fenced\": EPOCH or \"drained\": REGION");
}

std::string ControlPlane::Drain(const Principal& c, const json& req) {
  if (!access_.IsAdmin(c)) return Error(EACCES, kNotAdmin);
  // No default: a drain changes state, so a request that does not say which is refused.
  if (!req.contains("action") || !req["action"].is_string()) {
    return Error(EINVAL, "drain needs \"action\": \"start\", \"finish\" or \"rollback\"");
  }
  std::string action = req["action"].get<std::string>();
  DrainAction a;
  if (action == "start") a = DrainAction::kStart;
  else if (action == "finish") a = DrainAction::kFinish;
  else if (action == "rollback") a = DrainAction::kRollback;
  else return Error(EINVAL, "drain action is start, finish or rollback");
  StatusCode s = store_.Drain(a);
  if (s == StatusCode::kInvalidArgument) {
    return Error(s, action == "rollback" ? "rollback needs a drain that has not finished"
                                         : "finish needs a drain in progress");
  }
  if (s != StatusCode::kOk) {
    // The finish's fence: its new epoch could not be persisted. The drain is still in progress.
    return Error(s, "the drain's fence could not persist the new epoch (a data directory full or "
                    "failing?); the drain is still in progress: finish again, or roll back");
  }
  StoreStats st = store_.Stats();
  return Ok({{"draining", st.draining}, {"epoch", st.epoch}});
}

std::string ControlPlane::Evict(const Principal& c, const json& req) {
  if (!access_.IsAdmin(c)) return Error(EACCES, kNotAdmin);
  auto a = ParsePath(req);
  if (!a) return BadPath("evict", req);
  StatusCode s = store_.Evict(*a);
  if (s != StatusCode::kOk) return Error(s, s == StatusCode::kBusy ? "the block is pinned" : "not evicted");
  return Ok({{"path", a->RelativePath()}});
}

std::string ControlPlane::Pin(const Principal& c, const json& req, bool pinned) {
  auto a = ParsePath(req);
  if (!a) return BadPath(pinned ? "pin" : "unpin", req);
  // Pinning needs a configured tenant; unpinning a removed tenant's block is an admin's way out.
  if (pinned ? !access_.MayUseTenant(c, a->tenant) : !access_.MayAdminister(c, a->tenant)) {
    return Error(EACCES, kNotMember);
  }
  StatusCode s = store_.SetPinned(*a, pinned);
  if (s != StatusCode::kOk) return Error(s, "no such committed block");
  return Ok({{"path", a->RelativePath()}, {"pinned", pinned}});
}

std::string ControlPlane::Isolate(const Principal& c, const json& req) {
  if (!access_.IsAdmin(c)) return Error(EACCES, kNotAdmin);
  if (!req.contains("dir") || !req["dir"].is_string()) {
    return Error(EINVAL, "isolate needs \"dir\": a configured data directory");
  }
  std::string dir = req["dir"];
  StatusCode s = store_.IsolateDomain(dir);
  if (s == StatusCode::kNotFound) return Error(ENOENT, dir + " is not a configured data directory");
  if (s == StatusCode::kInvalidArgument) {
    return Error(EINVAL, "refusing to isolate " + dir + ": it is the last data directory in service");
  }
  if (s != StatusCode::kOk) return Error(s, "not isolated");
  return Ok({{"isolated", dir}});
}

}  // namespace gpucache
