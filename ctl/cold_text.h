// What gpucachectl prints for people from a cold.* reply (docs/control-protocol.md): kept apart
// from the requests so a test can hand it any reply, a hostile one included.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gpucache::ctl {

// cold.pack's reply: what was packed, the drain's outcome, and why it did not complete.
std::string PackSummary(const nlohmann::json& reply);

// cold.failed's reply: one line per failed job, or "no failed jobs".
std::string FailedText(const nlohmann::json& reply);

}  // namespace gpucache::ctl
