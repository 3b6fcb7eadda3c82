// The control channel as gpucachectl uses it: one JSON request and its reply through
// <mountpoint>/.gpucache/ctl (docs/control-protocol.md).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace gpucache::ctl {

// Prints "gpucachectl: MESSAGE" to stderr; returns exit code 2.
int Fail(const std::string& message);

// Sends one request; the reply, or nullopt with `error` set.
std::optional<nlohmann::json> Request(const std::string& mountpoint, const nlohmann::json& request,
                                      std::string& error);

// Sends a request and prints the reply: JSON as is, or `summary(reply)` for people. Returns 0,
// or 2 when the request failed (the daemon's errno and error on stderr).
int Send(const std::string& mountpoint, const nlohmann::json& request, bool as_json,
         const std::function<std::string(const nlohmann::json&)>& summary);

}  // namespace gpucache::ctl
