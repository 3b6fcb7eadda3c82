#include "ctl/cold_text.h"

#include "common/printable.h"

namespace gpucache::ctl {
namespace {

using nlohmann::json;

uint64_t Field(const json& j, const char* key) { return j.value(key, uint64_t{0}); }

// Text the object store wrote (an error's message or code, through the daemon): escaped, so a
// hostile or intercepted endpoint cannot forge lines or send escape sequences to the terminal.
std::string FromObjectStore(const std::string& s) { return Printable(s, 512); }

// A key of a reply's list: escaped; anything but a string as JSON (never an exception).
std::string KeyText(const json& key) {
  return key.is_string() ? FromObjectStore(key.get<std::string>()) : key.dump();
}

}  // namespace

std::string PackSummary(const json& r) {
  const json& d = r["drain"];
  std::string s = "packed " + r["blocks"].dump() + " block(s), " + r["bytes"].dump() +
                  " bytes, in " + r["packs"].dump() + " pack(s); " + r["skipped_cold"].dump() +
                  " already cold" + (r.value("budget_reached", false) ? "; budget reached" : "") +
                  "\nuploaded " + d["uploaded"].dump() + ", pending " + d["pending"].dump() +
                  ", failed " + d["failed"].dump() + "\n";
  if (Field(r, "skipped_unknown") > 0) {
    s += r["skipped_unknown"].dump() + " block(s) not packed: listing failed (" +
         FromObjectStore(r.value("list_error", std::string())) + ")\n";
  }
  if (Field(r, "refused_packs") > 0) s += r["refused_packs"].dump() + " pack(s) refused: sink full\n";
  if (d.contains("first_error")) {
    s += "first error: " + FromObjectStore(d["first_error"]["message"].get<std::string>()) + "\n";
  }
  if (!r.value("complete", false)) {
    s += "incomplete: see `gpucachectl cold failed`; temporary failures are retried in the background\n";
  }
  return s;
}

std::string FailedText(const json& r) {
  std::string out;
  for (const auto& f : r["failed"]) {
    out += "job=" + f["job"].dump() + " blocks=" + f["blocks"].dump() + " bytes=" +
           f["bytes"].dump() + " attempts=" + f["attempts"].dump() + " step=" +
           f["error"]["step"].get<std::string>() + " error=" + f["error"]["kind"].get<std::string>() +
           " " + FromObjectStore(f["error"]["code"].get<std::string>()) + "\n";
  }
  return out.empty() ? std::string("no failed jobs\n") : out;
}

std::string KeyLines(const std::string& label, const json& keys) {
  std::string out;
  if (!keys.is_array()) return out;
  for (const auto& k : keys) out += label + " " + KeyText(k) + "\n";
  return out;
}

std::string ResealText(const json& r) {
  auto n = [&](const char* key) { return std::to_string(Field(r, key)); };
  std::string out = "scanned " + n("manifests_scanned") + " manifest(s): resealed " +
                    n("manifests_resealed") + ", already current " + n("manifests_current") +
                    "; locators resealed " + n("locators_resealed") + ", already current " +
                    n("locators_current") + "; " + n("bytes") + " bytes\n";
  out += KeyLines("refused", r.value("refused", json::array()));
  if (r.value("budget_reached", false)) {
    // Escaped here; --json gives the key exactly, to pass back as it is.
    out += "budget reached; continue with --after " + KeyText(r.value("resume_after", json())) +
           " (the exact key: --json's resume_after)\n";
  }
  return out;
}

}  // namespace gpucache::ctl
