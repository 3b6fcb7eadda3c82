#include "fs/control.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "store/memory_store.h"

namespace gpucache {
namespace {

struct Plane {
  Config config = ParseConfig("[admins]\nuids = [0]\n[tenants.acme]\nuids = [1000]\n", "t");
  AccessPolicy access{config};
  MemoryStore store;
  ControlPlane control{store, access};
  nlohmann::json Ask(uint32_t uid, const std::string& request) {
    return nlohmann::json::parse(control.Handle(Principal{uid, uid, nullptr}, request));
  }
};

// Regression (fuzz_control): an unknown op whose 64th byte fell inside a multi-byte UTF-8
// character made the error message invalid UTF-8, and the JSON serializer threw, which would
// have terminated the daemon.
TEST_CASE("Control: an unknown op cut inside a UTF-8 character is answered, not a crash") {
  Plane p;
  std::string op = std::string(63, 'x') + "\xc3\xa9";  // the cut lands between 0xc3 and 0xa9
  auto reply = p.Ask(1000, "{\"op\":\"" + op + "\"}");
  CHECK(reply["ok"] == false);
  CHECK(reply["errno"] == "EINVAL");
}

TEST_CASE("Control: admin requests from a member are refused and change nothing") {
  Plane p;
  uint64_t epoch = p.store.Epoch();
  for (const char* req : {R"({"op":"fence"})", R"({"op":"drain"})", R"({"op":"reclaim","fenced":1})",
                          R"({"op":"isolate","dir":"/x"})"}) {
    CAPTURE(req);
    CHECK(p.Ask(1000, req)["errno"] == "EACCES");
  }
  CHECK(p.store.Epoch() == epoch);
  CHECK_FALSE(p.store.Stats().draining);
  CHECK(p.Ask(0, R"({"op":"fence"})")["epoch"] == epoch + 1);
}

// Regression (review, 2026-12-06): {"op":"drain","action":5} threw nlohmann's type_error out of
// Handle (the daemon terminated: one request took the node down), and {"op":"drain"} with no
// action started a drain. Every field of the wrong type is now an EINVAL that changes nothing.
TEST_CASE("Control: a drain without a string action is refused and changes nothing") {
  Plane p;
  uint64_t epoch = p.store.Epoch();
  for (const char* req : {R"({"op":"drain"})", R"({"op":"drain","action":5})", R"({"op":"drain","action":null})",
                          R"({"op":"drain","action":["start"]})", R"({"op":"drain","action":{}})"}) {
    CAPTURE(req);
    nlohmann::json reply = p.Ask(0, req);
    CHECK(reply["ok"] == false);
    CHECK(reply["errno"] == "EINVAL");
  }
  CHECK_FALSE(p.store.Stats().draining);
  CHECK(p.store.Epoch() == epoch);
  CHECK(p.Ask(0, R"({"op":"drain","action":"start"})")["draining"] == true);
}

// Regression (issue 17): on a mount without the cold tier, `gpucachectl cold ...` answered
// "unknown op 'cold.report'"; the reply now says the tier is not enabled.
TEST_CASE("Control: a cold op on a daemon without the cold tier says it is not enabled") {
  Plane p;
  for (const char* op : {"cold.report", "cold.pack", "cold.refill", "cold.failed"}) {
    CAPTURE(op);
    auto reply = p.Ask(0, std::string(R"({"op":")") + op + "\"}");
    CHECK(reply["ok"] == false);
    CHECK(reply["errno"] == "ENOTSUP");
    CHECK(reply["error"].get<std::string>().find("cold tier is not enabled") != std::string::npos);
  }
  CHECK(p.Ask(0, R"({"op":"coldreport"})")["error"].get<std::string>().find("unknown op") == 0);
}

// Regression (issue 17): a malformed block path was refused with the expected shape only; the
// refusal now also names what it was given.
// Regression: a store refusal's errno name came from strerrorname_np, which names ENOTSUP
// "EOPNOTSUPP" on Linux, while the hand-written "cold tier is not enabled" reply said "ENOTSUP":
// one errno, two names. Both now come from common/control_protocol.h.
TEST_CASE("Control: a store's kNotSupported is ENOTSUP, as the documented cold refusal is") {
  Plane p;  // a MemoryStore has no data directories to isolate
  auto reply = p.Ask(0, R"({"op":"isolate","dir":"/x"})");
  CHECK(reply["ok"] == false);
  CHECK(reply["errno"] == "ENOTSUP");
  CHECK(p.Ask(0, R"({"op":"cold.report"})")["errno"] == "ENOTSUP");
}

TEST_CASE("Control: evict, pin and unpin name the path shape they were given") {
  Plane p;
  auto evict = p.Ask(0, R"({"op":"evict","path":"/mnt/gpucache/acme"})");
  CHECK(evict["errno"] == "EINVAL");
  std::string msg = evict["error"];
  CHECK(msg.find("TENANT/NAMESPACE/BLOCK") != std::string::npos);
  CHECK(msg.find("given \"/mnt/gpucache/acme\"") != std::string::npos);
  CHECK(p.Ask(1000, R"({"op":"pin","path":"acme/x"})")["error"].get<std::string>().find(
            "pin needs") == 0);
  CHECK(p.Ask(1000, R"({"op":"unpin","path":7})")["error"].get<std::string>().find(
            "given a number") != std::string::npos);
  CHECK(p.Ask(0, R"({"op":"evict"})")["error"].get<std::string>().find("given no \"path\"") !=
        std::string::npos);
}

}  // namespace
}  // namespace gpucache
