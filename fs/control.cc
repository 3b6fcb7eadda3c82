#include "fs/control.h"

#include <nlohmann/json.hpp>
#include <sstream>

namespace gpucache {
namespace {

using nlohmann::json;

std::string Error(const char* err, const std::string& message) {
  return json{{"ok", false}, {"errno", err}, {"error", message}}.dump() + "\n";
}

json CountersJson(const TenantCounters& t) {
  return json{{"blocks", t.blocks},
              {"bytes", t.bytes},
              {"reservations", t.reservations},
              {"hits", t.hits},
              {"prefix_hits", t.prefix_hits},
              {"misses", t.misses},
              {"commits", t.commits},
              {"checksum_failures", t.checksum_failures}};
}

}  // namespace

std::string ControlPlane::StatsText(const Caller& c) {
  StoreStats stats = store_.Stats();
  std::ostringstream out;
  out << "epoch " << stats.epoch << "\n";
  for (const TenantConfig& t : access_.tenants()) {
    if (!access_.MayUseTenant(c, t.name)) continue;
    const TenantCounters& n = stats.tenants[t.name];
    out << "tenant=" << t.name << " blocks=" << n.blocks << " bytes=" << n.bytes
        << " reservations=" << n.reservations << " hits=" << n.hits
        << " prefix_hits=" << n.prefix_hits << " misses=" << n.misses << " commits=" << n.commits
        << " checksum_failures=" << n.checksum_failures << "\n";
  }
  return out.str();
}

std::string ControlPlane::EpochText() { return std::to_string(store_.Epoch()) + "\n"; }

std::string ControlPlane::Handle(const Caller& c, std::string_view request) {
  json req = json::parse(request, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) {
    return Error("EINVAL", "request is not a JSON object");
  }
  if (!req.contains("op") || !req["op"].is_string()) {
    return Error("EINVAL", "request needs a string field \"op\"");
  }
  std::string op = req["op"];
  if (op == "lookup") {
    if (!req.contains("identity") || !req["identity"].is_string()) {
      return Error("EINVAL", "lookup needs \"identity\": the hex of the canonical identity (GPCK)");
    }
    return Lookup(c, req["identity"]);
  }
  if (op == "status") return Status(c);
  return Error("EINVAL", "unknown op '" + op.substr(0, 64) + "' (known: lookup, status)");
}

std::string ControlPlane::Lookup(const Caller& c, const std::string& identity_hex) {
  auto bytes = HexDecode(identity_hex);
  if (!bytes) return Error("EINVAL", "identity is not hex");
  Result<CacheIdentity> id = DecodePhysicalKey(*bytes);
  if (!id.ok()) return Error("EINVAL", "identity does not decode as a valid GPCK v1");
  if (!access_.MayUseTenant(c, id->tenant)) {
    return Error("EACCES", "caller is not a member of the identity's tenant");
  }
  LookupResult r = store_.Lookup(id.value());
  json reply{{"ok", true}, {"result", ToString(r.kind)}};
  if (r.kind == LookupResult::Kind::kMiss) {
    reply["reason"] = ToString(r.reason);
  } else {
    reply["path"] = r.address.RelativePath();
    reply["valid_length"] = r.valid_length;
  }
  return reply.dump() + "\n";
}

std::string ControlPlane::Status(const Caller& c) {
  StoreStats stats = store_.Stats();
  json tenants = json::object();
  for (const TenantConfig& t : access_.tenants()) {
    if (access_.MayUseTenant(c, t.name)) tenants[t.name] = CountersJson(stats.tenants[t.name]);
  }
  return json{{"ok", true}, {"epoch", stats.epoch}, {"tenants", tenants}}.dump() + "\n";
}

}  // namespace gpucache
