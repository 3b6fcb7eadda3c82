// The control channel's format (docs/control-protocol.md), one definition for fs/ (the channel
// and its own requests) and cold/ (the cold.* extension). A reply is one JSON object and a
// newline: "ok": true with the body, or "ok": false with "errno", the symbolic name, and
// "error", the why. The name is derived from the errno value here and nowhere else, so a
// reply never picks its errno string by hand (fs/ gets the value from fs/errno_map.cc).
#pragma once

#include <errno.h>
#include <string.h>  // strerrorname_np (GNU)

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace gpucache::control_protocol {

// The symbolic name of `errnum`: "EINVAL" for EINVAL. ENOTSUP is "ENOTSUP" (Linux gives it the
// value of EOPNOTSUPP, whose name glibc would return; the protocol and POSIX say ENOTSUP).
inline const char* ErrnoName(int errnum) {
  if (errnum == ENOTSUP) return "ENOTSUP";
  const char* name = strerrorname_np(errnum);
  return name ? name : "EIO";
}

// `j` serialized on one line. Replies may echo what the caller sent: invalid UTF-8 is replaced
// rather than thrown on (a throw would take the daemon down: found by fuzz_control).
inline std::string Json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A whole reply: `j` and the newline.
inline std::string Line(const nlohmann::json& j) { return Json(j) + "\n"; }

inline std::string Ok(nlohmann::json body = nlohmann::json::object()) {
  body["ok"] = true;
  return Line(body);
}

inline std::string Error(int errnum, const std::string& message) {
  return Line(nlohmann::json{{"ok", false}, {"errno", ErrnoName(errnum)}, {"error", message}});
}

// The refusal of an admin request to anyone else (EACCES).
inline constexpr char kNotAdmin[] = "this request needs an admin (see [admins] in the configuration)";

// Field `key` of a request as a non-negative integer; nullopt if absent or anything else.
inline std::optional<uint64_t> Number(const nlohmann::json& req, const char* key) {
  if (!req.contains(key) || !req[key].is_number_unsigned()) return std::nullopt;
  return req[key].get<uint64_t>();
}

// A request with "wait_ms" may wait that long for something to finish (cold.op waits for its
// op) before it is answered. It is answered when its reply is read, not when it is written:
// the kernel serializes writes to one file, so a wait inside write() would hold up every other
// control request of the node, while reads of the reply run side by side, each on a FUSE
// thread of its own (docs/control-protocol.md, "Waiting").
inline constexpr uint64_t kMaxWaitMs = 10'000;
//
// The cold tier's requests are answered on read too, unless they ask for "async": true (which
// answers at once with an op id): a synchronous refill or pack waits on the object store, and
// one tenant's pack once held every other tenant's lookup for 1.5 s inside write() (issue 29).
inline bool AnswersOnRead(const nlohmann::json& req) {
  if (!req.is_object()) return false;
  if (req.contains("wait_ms")) return true;
  auto op = req.find("op");
  if (op == req.end() || !op->is_string() || !op->get_ref<const std::string&>().starts_with("cold.")) return false;
  auto async = req.find("async");
  return async == req.end() || *async != true;
}

}  // namespace gpucache::control_protocol
