// The virtual `.gpucache/` directory: `stats`, `epoch` and `quarantine` (read-only views) and
// `ctl`, a request/reply channel (docs/control-protocol.md).
//
// ctl: open `.gpucache/ctl` read-write, write one JSON request, read the JSON reply from the
// same handle. Requests are authorized by the uid/groups of the caller that wrote them: admin
// requests (fence, reclaim --fenced, drain, evict, isolate) need an admin; tenant requests (lookup,
// pin, unpin, reclaim --drained) a member of the block's tenant or an admin. A request never
// reveals anything about a tenant the caller does not belong to. Every reply is one JSON
// object and a newline, with "ok": true, or "ok": false plus "errno" and "error".
//
// Thread safety: stateless apart from the store and policy, which lock themselves.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/access.h"
#include "store/indexed_store.h"

namespace gpucache {

inline constexpr size_t kMaxControlRequest = 64 * 1024;

// What a control extension (a module fs/ does not include, such as the cold tier) learns of
// the caller that wrote a request: fs/ authenticates it; the extension authorizes with this.
struct ExtensionCaller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool admin = false;
  std::vector<std::string> tenants;  // tenants the caller is a member of
};
// Handles a request whose "op" starts with the extension's prefix; returns the whole reply
// line (the same shape as every other reply). Runs on the FUSE thread that wrote the request.
using ControlExtension = std::function<std::string(const ExtensionCaller&, std::string_view)>;

class ControlPlane {
 public:
  ControlPlane(IndexedStore& store, const AccessPolicy& access) : store_(store), access_(access) {}

  // Human-readable counters, one line per tenant the caller may see.
  std::string StatsText(const Caller& c);
  std::string EpochText();
  // One line per quarantined block the caller may see.
  std::string QuarantineText(const Caller& c);
  // Executes one request; always returns a reply (errors included).
  std::string Handle(const Caller& c, std::string_view request);
  // REQUIRES: called before the mount serves requests. `prefix` like "cold.".
  void AddExtension(std::string prefix, ControlExtension extension);

 private:
  std::string Dispatch(const Caller& c, const nlohmann::json& req, std::string_view request);
  std::string Lookup(const Caller& c, const nlohmann::json& req);
  std::string Status(const Caller& c);
  std::string Quarantine(const Caller& c);
  std::string Fence(const Caller& c);
  std::string Reclaim(const Caller& c, const nlohmann::json& req);
  std::string Drain(const Caller& c, const nlohmann::json& req);
  std::string Evict(const Caller& c, const nlohmann::json& req);
  std::string Pin(const Caller& c, const nlohmann::json& req, bool pinned);
  std::string Isolate(const Caller& c, const nlohmann::json& req);

  IndexedStore& store_;
  const AccessPolicy& access_;
  std::vector<std::pair<std::string, ControlExtension>> extensions_;
};

}  // namespace gpucache
