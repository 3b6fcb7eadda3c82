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

// One line per object key of `keys` (a reply's list), each after `label` and a space: keys come
// from the object store's listings and manifests, so they are escaped like its error text.
std::string KeyLines(const std::string& label, const nlohmann::json& keys);

// cold.reseal's reply: the counts, the keys refused, and where to continue.
std::string ResealText(const nlohmann::json& reply);

}  // namespace gpucache::ctl
