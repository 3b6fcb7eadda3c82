#include "ctl/cold_commands.h"

#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "clients/cpp/identity_file.h"
#include "ctl/channel.h"
#include "ctl/cold_text.h"
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

// An async cold op's reply: asks cold.op to answer when the op is done, waiting up to a
// second per request (the daemon answers it on the read of the reply, so the wait holds up no
// other control request: docs/control-protocol.md, "Waiting"). A daemon that answered at once
// although the op is not done (it had callers enough waiting, or it predates wait_ms) is asked
// again after 1 ms doubling to 50 ms. A reply without an op id (a refusal, an older daemon
// without async ops) is returned as it is (adr/0013).
std::optional<json> AwaitOp(const std::string& mountpoint, std::optional<json> reply,
                            std::string& error, int* err) {
  constexpr int kWaitMs = 1000;
  auto running = [](const std::optional<json>& r) {
    return r && r->value("ok", false) && r->contains("op_id") && r->value("state", "") != "done";
  };
  for (int pause_ms = 1; running(reply);) {
    auto asked = std::chrono::steady_clock::now();
    reply = Request(mountpoint, {{"op", "cold.op"}, {"op_id", (*reply)["op_id"]}, {"wait_ms", kWaitMs}},
                    error, err);
    if (running(reply) && std::chrono::steady_clock::now() - asked < std::chrono::milliseconds(kWaitMs / 2)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      pause_ms = std::min(pause_ms * 2, 50);
    }
  }
  return reply;
}

// cold.pack can take minutes: it runs on the daemon's workers while we poll its op, and a
// second thread polls cold.report for the bar (blocks packed out of the blocks in the hot tier).
int Pack(const ColdArgs& a, bool as_json) {
  json req{{"op", "cold.pack"}, {"async", true}};
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
  int err = 0;
  auto reply = AwaitOp(a.mountpoint, Request(a.mountpoint, req, error, &err), error, &err);
  done = true;
  if (bar.joinable()) bar.join();
  if (!reply) return Fail(error, 2, err);
  const json& r = *reply;
  if (!r.value("ok", false)) return Refused(r);
  std::cout << (as_json ? r.dump(2) + "\n" : PackSummary(r));
  return r.value("complete", false) ? 0 : 3;
}

int PurgeTenant(const ColdArgs& a, bool as_json) {
  // Each request is bounded (max_manifests); repeat while it makes progress.
  json total{{"manifests_deleted", 0}, {"locators_deleted", 0}, {"kept", json::array()}};
  for (;;) {
    std::string error;
    int err = 0;
    auto reply = Request(a.mountpoint, {{"op", "cold.purge_tenant"}, {"tenant", a.tenant},
                                        {"max_manifests", a.max_manifests}}, error, &err);
    if (!reply) return Fail(error, 2, err);
    const json& r = *reply;
    if (!r.value("ok", false)) return Refused(r);
    uint64_t deleted = Field(r, "manifests_deleted") + Field(r, "locators_deleted");
    total["manifests_deleted"] = Field(total, "manifests_deleted") + Field(r, "manifests_deleted");
    total["locators_deleted"] = Field(total, "locators_deleted") + Field(r, "locators_deleted");
    total["kept"] = r.value("kept", json::array());
    total["complete"] = r.value("complete", false);
    if (total["complete"] == true || deleted == 0) break;
  }
  if (as_json) {
    std::cout << total.dump(2) << "\n";
  } else {
    std::cout << "purged tenant " << a.tenant << ": " << total["manifests_deleted"].dump()
              << " manifest(s), " << total["locators_deleted"].dump() << " locator(s)\n";
    std::cout << KeyLines("kept", total["kept"]);
  }
  return total["complete"] == true ? 0 : 3;
}

int Sweep(const ColdArgs& a, bool as_json) {
  // Each request is bounded (max_deletes); repeat while there is more and it makes progress.
  json total{{"deleted", 0}, {"bytes_deleted", 0}, {"kept", json::array()}};
  for (;;) {
    std::string error;
    int err = 0;
    auto reply = Request(a.mountpoint, {{"op", "cold.sweep"}, {"older_than", a.older_than},
                                        {"max_deletes", a.max_deletes}}, error, &err);
    if (!reply) return Fail(error, 2, err);
    const json& r = *reply;
    if (!r.value("ok", false)) return Refused(r);
    uint64_t deleted = r.value("deleted", json::array()).size();
    total["deleted"] = Field(total, "deleted") + deleted;
    total["bytes_deleted"] = Field(total, "bytes_deleted") + Field(r, "bytes_deleted");
    for (const char* k : {"packs_listed", "referenced", "young", "busy", "unknown_age"}) total[k] = Field(r, k);
    total["kept"] = r.value("kept", json::array());
    total["complete"] = r.value("complete", false);
    if (!r.value("more", false) || deleted == 0) break;
  }
  if (as_json) {
    std::cout << total.dump(2) << "\n";
  } else {
    std::cout << "swept " << total["deleted"].dump() << " orphan pack object(s), "
              << total["bytes_deleted"].dump() << " bytes; " << total["referenced"].dump()
              << " named by a manifest, " << total["young"].dump()
              << " too young to judge (an upload may be under way)";
    if (Field(total, "unknown_age") > 0) {
      std::cout << "; " << total["unknown_age"].dump() << " of an age the object store does not give (never deleted)";
    }
    std::cout << "\n";
    std::cout << KeyLines("kept", total["kept"]);
  }
  return total["complete"] == true ? 0 : 3;
}

int Refill(const ColdArgs& a, bool as_json) {
  CacheIdentity id;
  try {
    id = IdentityFromTomlFile(a.identity_file);
  } catch (const std::exception& e) {
    return Fail(e.what(), 64);
  }
  json req{{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(id))}};
  if (a.budget) req["budget"] = *a.budget;
  req["async"] = true;  // runs on the daemon's refill workers; we poll (adr/0013)
  std::string error;
  int err = 0;
  auto reply = AwaitOp(a.mountpoint, Request(a.mountpoint, req, error, &err), error, &err);
  if (!reply) return Fail(error, 2, err);
  const json& r = *reply;
  if (!r.value("ok", false)) return Refused(r);
  bool missing = r["result"] == "missing";
  if (as_json) {
    std::cout << r.dump(2) << "\n";
  } else {
    std::cout << (missing ? "missing (" + r["reason"].get<std::string>() + ")"
                          : r["result"].get<std::string>() + " " + r["path"].get<std::string>())
              << "\n";
  }
  return missing ? 1 : 0;
}

std::string ReportText(const json& r) {
  std::string out;
  for (auto& [k, v] : r["cold"].items()) out += k + ": " + v.dump() + "\n";
  return out;
}

int Reseal(const ColdArgs& a, bool as_json) {
  json req{{"op", "cold.reseal"}};
  if (a.budget) req["budget"] = *a.budget;
  if (!a.after.empty()) req["after"] = a.after;
  return Send(a.mountpoint, req, as_json, ResealText);
}

}  // namespace

int Cold(const std::string& action, const ColdArgs& a, bool as_json) {
  const std::string& m = a.mountpoint;
  if (action == "pack") return Pack(a, as_json);
  if (action == "refill") return Refill(a, as_json);
  if (action == "purge-tenant") return PurgeTenant(a, as_json);
  if (action == "sweep") return Sweep(a, as_json);
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
      return KeyLines("deleted", r.value("deleted", json::array())) +
             KeyLines("kept", r.value("kept", json::array()));
    });
  }
  if (action == "reseal") return Reseal(a, as_json);
  if (action == "retain") {
    return Send(m, {{"op", "cold.retain"}, {"manifest", a.manifest}, {"seconds", a.seconds}},
                as_json, [](const json& r) {
                  return "retained until " + r["retain_until_unix_ns"].dump() + " (unix ns)\n";
                });
  }
  return 64;
}

}  // namespace gpucache::ctl
