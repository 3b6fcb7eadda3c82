// The control channel as gpucachectl uses it: one JSON request and its reply through
// <mountpoint>/.gpucache/ctl (docs/control-protocol.md), and how failures are reported.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace gpucache::ctl {

// With --json every outcome is one JSON object on stdout, local failures included (no mount,
// a missing file, bad usage), so a script never has to parse stderr. Set once, by main.
void SetJsonOutput(bool on);
bool JsonOutput();

// Reports a failure and returns `exit_code`: "gpucachectl: MESSAGE" on stderr, or with --json
// {"ok": false, "errno": NAME (when `err` is set), "error": MESSAGE, "exit_code": N} on stdout.
int Fail(const std::string& message, int exit_code = 2, int err = 0);

// The mountpoint to talk to for a MOUNTPOINT argument: `given` itself when it is the root of a
// gpucachefs mount or no gpucachefs mount holds it (Request then says why it fails), else the
// mountpoint of the gpucachefs mount that holds it (a folder inside the mount: MNT/acme/ns).
std::string ResolveMount(const std::string& given);

// Sends one request; the reply, or nullopt with `error` (and `err`, the errno, when one applies).
std::optional<nlohmann::json> Request(const std::string& mountpoint, const nlohmann::json& request,
                                      std::string& error, int* err = nullptr);

// Sends a request and prints the reply: JSON as is, or `summary(reply)` for people. Returns 0,
// or 2 when the request failed (the daemon's errno and error on stderr).
int Send(const std::string& mountpoint, const nlohmann::json& request, bool as_json,
         const std::function<std::string(const nlohmann::json&)>& summary);

// Returns 2 after reporting the daemon's refusal `reply` (ok false): with --json the reply as
// is plus "exit_code", else "gpucachectl: ERRNO: ERROR" on stderr.
int Refused(const nlohmann::json& reply);

}  // namespace gpucache::ctl
