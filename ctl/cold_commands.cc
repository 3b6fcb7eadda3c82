#include "ctl/cold_commands.h"

#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "clients/cpp/identity_file.h"
#include "ctl/channel.h"
#include "ctl/progress.h"
#include "store/identity.h"

namespace gpucache::ctl {
namespace {

using nlohmann::json;

uint64_t Field(const json& j, const char* key) { return j.value(key, uint64_t{0}); }

std::optional<json> ColdReport(const std::string& mountpoint) {
  std::string error;
  auto r = Request(mountpoint, {{"op", "cold.report"}}, error);
  if (!r || !r->value("ok", false)) return std::nullopt;
  return (*r)["cold"];
}

// Committed blocks the caller can see: the most a pack can enqueue.
uint64_t HotBlocks(const std::string& mountpoint) {
  std::string error;
  auto r = Request(mountpoint, {{"op", "status"}}, error);
  uint64_t n = 0;
  if (r && r->value("ok", false)) {
    for (auto& [name, t] : (*r)["tenants"].items()) n += Field(t, "blocks");
  }
  return n;
}

std::string PackSummary(const json& r) {
  const json& d = r["drain"];
  std::string s = "packed " + r["blocks"].dump() + " block(s), " + r["bytes"].dump() +
                  " bytes, in " + r["packs"].dump() + " pack(s); " + r["skipped_cold"].dump() +
                  " already cold" + (r.value("budget_reached", false) ? "; budget reached" : "") +
                  "\nuploaded " + d["uploaded"].dump() + ", pending " + d["pending"].dump() +
                  ", failed " + d["failed"].dump() + "\n";
  if (Field(r, "skipped_unknown") > 0) {
    s += r["skipped_unknown"].dump() + " block(s) not packed: listing failed (" +
         r.value("list_error", std::string()) + ")\n";
  }
  if (Field(r, "refused_packs") > 0) s += r["refused_packs"].dump() + " pack(s) refused: sink full\n";
  if (d.contains("first_error")) s += "first error: " + d["first_error"]["message"].get<std::string>() + "\n";
  if (!r.value("complete", false)) {
    s += "incomplete: see `gpucachectl cold failed`; temporary failures are retried in the background\n";
  }
  return s;
}

// cold.pack can take minutes: it runs on one handle while a second one polls cold.report for
// the bar (blocks packed so far out of the blocks in the hot tier).
int Pack(const ColdArgs& a, bool as_json) {
  json req{{"op", "cold.pack"}};
  if (!a.tenant.empty()) req["tenant"] = a.tenant;
  if (a.budget) req["budget"] = *a.budget;
  auto start = ColdReport(a.mountpoint);
  uint64_t base = start ? Field(*start, "packed_blocks") : 0;
  std::atomic<bool> done{false};
  std::thread bar;
  if (start && !as_json) {
    bar = std::thread([&] {
      Progress p("packing blocks", HotBlocks(a.mountpoint));
      uint64_t shown = 0;
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        auto now = ColdReport(a.mountpoint);
        uint64_t packed = now ? Field(*now, "packed_blocks") - base : shown;
        if (packed > shown) p.Step(packed - shown), shown = packed;
      }
    });
  }
  std::string error;
  auto reply = Request(a.mountpoint, req, error);
  done = true;
  if (bar.joinable()) bar.join();
  if (!reply) return Fail(error);
  const json& r = *reply;
  if (as_json) std::cout << r.dump(2) << "\n";
  if (!r.value("ok", false)) {
    if (!as_json) std::cerr << "gpucachectl: " << r.value("errno", "") << ": " << r.value("error", "") << "\n";
    return 2;
  }
  bool complete = r.value("complete", false);
  if (!as_json) std::cout << PackSummary(r);
  return complete ? 0 : 3;
}

int PurgeTenant(const ColdArgs& a, bool as_json) {
  // Each request is bounded (max_manifests); repeat while it makes progress.
  json total{{"manifests_deleted", 0}, {"locators_deleted", 0}, {"kept", json::array()}};
  for (;;) {
    std::string error;
    auto reply = Request(a.mountpoint, {{"op", "cold.purge_tenant"}, {"tenant", a.tenant},
                                        {"max_manifests", a.max_manifests}}, error);
    if (!reply) return Fail(error);
    const json& r = *reply;
    if (!r.value("ok", false)) {
      if (as_json) std::cout << r.dump(2) << "\n";
      else std::cerr << "gpucachectl: " << r.value("errno", "") << ": " << r.value("error", "") << "\n";
      return 2;
    }
    uint64_t deleted = Field(r, "manifests_deleted") + Field(r, "locators_deleted");
    total["manifests_deleted"] = Field(total, "manifests_deleted") + Field(r, "manifests_deleted");
    total["locators_deleted"] = Field(total, "locators_deleted") + Field(r, "locators_deleted");
    total["kept"] = r["kept"];
    total["complete"] = r.value("complete", false);
    if (total["complete"] == true || deleted == 0) break;
  }
  if (as_json) {
    std::cout << total.dump(2) << "\n";
  } else {
    std::cout << "purged tenant " << a.tenant << ": " << total["manifests_deleted"].dump()
              << " manifest(s), " << total["locators_deleted"].dump() << " locator(s)\n";
    for (const auto& k : total["kept"]) std::cout << "kept " << k.get<std::string>() << "\n";
  }
  return total["complete"] == true ? 0 : 3;
}

int Refill(const ColdArgs& a, bool as_json) {
  CacheIdentity id;
  try {
    id = IdentityFromTomlFile(a.identity_file);
  } catch (const std::exception& e) {
    std::cerr << "gpucachectl: " << e.what() << "\n";
    return 64;
  }
  json req{{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(id))}};
  if (a.budget) req["budget"] = *a.budget;
  req["async"] = true;  // runs on the daemon's refill workers; we poll (adr/0013)
  std::string error;
  auto reply = Request(a.mountpoint, req, error);
  for (int wait_ms = 1; reply && reply->value("ok", false) && reply->contains("op_id") &&
                        reply->value("state", "") != "done";
       wait_ms = std::min(wait_ms * 2, 50)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    reply = Request(a.mountpoint, {{"op", "cold.op"}, {"op_id", (*reply)["op_id"]}}, error);
  }
  if (!reply) return Fail(error);
  const json& r = *reply;
  if (as_json) std::cout << r.dump(2) << "\n";
  if (!r.value("ok", false)) {
    if (!as_json) std::cerr << "gpucachectl: " << r.value("errno", "") << ": " << r.value("error", "") << "\n";
    return 2;
  }
  bool missing = r["result"] == "missing";
  if (!as_json) {
    std::cout << (missing ? "missing (" + r["reason"].get<std::string>() + ")"
                          : r["result"].get<std::string>() + " " + r["path"].get<std::string>())
              << "\n";
  }
  int rc = 0;
  return rc != 0 ? rc : missing ? 1 : 0;
}

std::string ReportText(const json& r) {
  std::string out;
  for (auto& [k, v] : r["cold"].items()) out += k + ": " + v.dump() + "\n";
  return out;
}

std::string FailedText(const json& r) {
  std::string out;
  for (const auto& f : r["failed"]) {
    out += "job=" + f["job"].dump() + " blocks=" + f["blocks"].dump() + " bytes=" +
           f["bytes"].dump() + " attempts=" + f["attempts"].dump() + " step=" +
           f["error"]["step"].get<std::string>() + " error=" + f["error"]["kind"].get<std::string>() +
           " " + f["error"]["code"].get<std::string>() + "\n";
  }
  return out.empty() ? std::string("no failed jobs\n") : out;
}

}  // namespace

int Cold(const std::string& action, const ColdArgs& a, bool as_json) {
  const std::string& m = a.mountpoint;
  if (action == "pack") return Pack(a, as_json);
  if (action == "refill") return Refill(a, as_json);
  if (action == "purge-tenant") return PurgeTenant(a, as_json);
  if (action == "report") return Send(m, {{"op", "cold.report"}}, as_json, ReportText);
  if (action == "failed") return Send(m, {{"op", "cold.failed"}}, as_json, FailedText);
  if (action == "retry" || action == "drop") {
    return Send(m, {{"op", "cold." + action}, {"job", a.job}}, as_json, [&](const json&) {
      return action + ": job " + std::to_string(a.job) + "\n";
    });
  }
  if (action == "drain") {
    return Send(m, {{"op", "cold.drain"}}, as_json, [](const json& r) {
      return "uploaded " + r["drain"]["uploaded"].dump() + ", pending " +
             r["drain"]["pending"].dump() + ", failed " + r["drain"]["failed"].dump() + "\n";
    });
  }
  if (action == "reclaim") {
    return Send(m, {{"op", "cold.reclaim"}, {"manifest", a.manifest}}, as_json, [](const json& r) {
      std::string out;
      for (const auto& k : r["deleted"]) out += "deleted " + k.get<std::string>() + "\n";
      for (const auto& k : r["kept"]) out += "kept " + k.get<std::string>() + "\n";
      return out;
    });
  }
  if (action == "retain") {
    return Send(m, {{"op", "cold.retain"}, {"manifest", a.manifest}, {"seconds", a.seconds}},
                as_json, [](const json& r) {
                  return "retained until " + r["retain_until_unix_ns"].dump() + " (unix ns)\n";
                });
  }
  return 64;
}

}  // namespace gpucache::ctl
