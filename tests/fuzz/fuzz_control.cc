// libFuzzer: the .gpucache/ctl request parser, as a non-admin tenant member would send it.
// Properties: every request gets one JSON object with "ok"; a non-admin never fences, drains or
// evicts (the epoch and drain state do not change).
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fs/control.h"
#include "store/memory_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpucache::Config config = gpucache::ParseConfig(
      "[admins]\nuids = [0]\n[tenants.acme]\nuids = [1000]\n[tenants.globex]\nuids = [2000]\n", "fuzz");
  static gpucache::AccessPolicy access(config);
  static gpucache::MemoryStore store;
  static gpucache::ControlPlane control(store, access);
  uint64_t epoch = store.Epoch();
  std::string reply = control.Handle(gpucache::Principal{1000, 1000, nullptr},
                                     std::string_view(reinterpret_cast<const char*>(data), size));
  auto j = nlohmann::json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("ok") || reply.back() != '\n') std::abort();
  if (store.Epoch() != epoch || store.Stats().draining) std::abort();
  return 0;
}
