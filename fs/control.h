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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "fs/access.h"
#include "fs/log.h"
#include "store/block_store.h"

namespace gpucache {

inline constexpr size_t kMaxControlRequest = 64 * 1024;

// Handles a request whose "op" starts with the extension's prefix (a module fs/ does not
// include, such as the cold tier); returns the whole reply line (the same shape as every other
// reply). Runs on the FUSE thread that wrote the request. fs/ authenticates the caller and
// hands it established (AccessPolicy::Establish); the extension authorizes with that.
using ControlExtension = std::function<std::string(const Principal&, std::string_view)>;

class ControlPlane {
 public:
  ControlPlane(BlockStore& store, const AccessPolicy& access) : store_(store), access_(access) {}

  // Human-readable counters, one line per tenant the caller may see.
  std::string StatsText(const Principal& c);
  // The tenants `c` may see in the stats and status: its configured ones, and for an admin
  // also removed tenants still holding blocks, quarantined blocks or fills.
  std::vector<std::string> ShownTenants(const Principal& c, const StoreStats& stats) const;
  std::string EpochText();
  // One line per quarantined block the caller may see.
  std::string QuarantineText(const Principal& c);
  // Executes one request; always returns a reply (errors included).
  std::string Handle(const Principal& c, std::string_view request);
  // True for a request that may wait ("wait_ms"): the filesystem runs it when its reply is
  // read, not inside the write() that carried it (control_protocol::AnswersOnRead).
  static bool AnswersOnRead(std::string_view request);
  // Whether an action of `c` (a control request, a pin by xattr) is logged now: an admin's
  // always; a tenant member's at most ten lines a second per uid (a busy engine's pins came at
  // 1,300 lines a second), the rest counted in gpucache_log_lines_suppressed_total.
  bool MayLogActionOf(const Principal& c);
  // REQUIRES: called before the mount serves requests. `prefix` like "cold.".
  void AddExtension(std::string prefix, ControlExtension extension);

 private:
  std::string Dispatch(const Principal& c, const nlohmann::json& req, std::string_view request);
  std::string Lookup(const Principal& c, const nlohmann::json& req);
  std::string Status(const Principal& c);
  std::string Quarantine(const Principal& c);
  std::string Fence(const Principal& c);
  std::string Reclaim(const Principal& c, const nlohmann::json& req);
  std::string Drain(const Principal& c, const nlohmann::json& req);
  std::string Evict(const Principal& c, const nlohmann::json& req);
  std::string Pin(const Principal& c, const nlohmann::json& req, bool pinned);
  std::string Isolate(const Principal& c, const nlohmann::json& req);

  BlockStore& store_;
  const AccessPolicy& access_;
  std::vector<std::pair<std::string, ControlExtension>> extensions_;
  BurstLimiter action_log_{10, std::chrono::seconds(1)};
};

}  // namespace gpucache
