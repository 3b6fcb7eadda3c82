// gpucachectl's text for cold.* replies (ctl/cold_text.h), fed replies a hostile or intercepted
// S3 endpoint could have shaped: its error message and code reach the reply as it sent them.
#include "ctl/cold_text.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

namespace gpucache::ctl {
namespace {

using nlohmann::json;

// What an endpoint would send to forge a line and colour the terminal.
const std::string kForged = "denied\nfirst error: none\x1b[2K";
const std::string kEscaped = "denied\\x0afirst error: none\\x1b[2K";

json PackReply() {
  return json{{"blocks", 1}, {"bytes", 10}, {"packs", 1}, {"skipped_cold", 0},
              {"skipped_unknown", 2}, {"list_error", kForged}, {"refused_packs", 0},
              {"complete", false},
              {"drain", {{"uploaded", 0}, {"pending", 0}, {"failed", 1},
                         {"first_error", {{"message", kForged}, {"code", kForged}}}}}};
}

size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// Regression: the text of an S3 error was printed as it came, so "\n" in it forged a line of
// gpucachectl's output and "\x1b" reached the terminal.
TEST_CASE("Cold text: an S3 error's newline and escape are printed escaped, on their line") {
  std::string pack = PackSummary(PackReply());
  CAPTURE(pack);
  CHECK(pack.find('\x1b') == std::string::npos);
  CHECK(pack.find("listing failed (" + kEscaped + ")\n") != std::string::npos);
  CHECK(pack.find("first error: " + kEscaped + "\n") != std::string::npos);
  CHECK(Lines(pack) == 5);  // packed, uploaded, not packed, first error, incomplete

  json failed{{"failed", json::array({{{"job", 7}, {"blocks", 1}, {"bytes", 10}, {"attempts", 3},
                                       {"error", {{"step", "object"}, {"kind", "denied"},
                                                  {"code", kForged}}}}})}};
  std::string text = FailedText(failed);
  CHECK(text == "job=7 blocks=1 bytes=10 attempts=3 step=object error=denied " + kEscaped + "\n");
}

// Regression (2026-12-07): object keys (reclaim's deleted and kept, purge-tenant's kept,
// reseal's refused and where to resume) were printed as the listing or manifest gave them.
TEST_CASE("Cold text: object keys from a listing are printed escaped, one per line") {
  json keys = json::array({"packs/ok", kForged, 42});
  CHECK(KeyLines("kept", keys) == "kept packs/ok\nkept " + kEscaped + "\nkept 42\n");
  CHECK(KeyLines("kept", json()).empty());  // no list: no lines, no exception

  json reseal{{"manifests_scanned", 2}, {"manifests_resealed", 1}, {"manifests_current", 0},
              {"locators_resealed", 0}, {"locators_current", 0}, {"bytes", 5},
              {"refused", json::array({kForged})}, {"budget_reached", true},
              {"resume_after", kForged}};
  std::string text = ResealText(reseal);
  CAPTURE(text);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find("refused " + kEscaped + "\n") != std::string::npos);
  CHECK(text.find("continue with --after " + kEscaped + " (") != std::string::npos);
  CHECK(Lines(text) == 3);
  CHECK(ResealText(json::object()).starts_with("scanned 0 manifest(s)"));  // missing counts: 0
}

}  // namespace
}  // namespace gpucache::ctl
