// The .gpucache/ control namespace: lookup (hit, prefix hit, miss with reason), stats, epoch.
#include <doctest/doctest.h>
#include <errno.h>

#include <nlohmann/json.hpp>

#include "fs/config.h"
#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;
using nlohmann::json;

// The stats line of one tenant, with a trailing space so that " key=value " matches any key.
std::string StatsLine(const std::string& stats, const std::string& tenant) {
  auto at = stats.find("tenant=" + tenant + " ");
  if (at == std::string::npos) return "";
  return stats.substr(at, stats.find('\n', at) - at) + " ";
}

json Lookup(const MountedFs& m, const CacheIdentity& id) {
  std::string reply =
      Control(m, "{\"op\":\"lookup\",\"identity\":\"" + HexEncode(EncodePhysicalKey(id)) + "\"}");
  return json::parse(reply, nullptr, false);
}

TEST_CASE("Mount: lookup answers hit, prefix hit and miss with a reason, never bytes") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity half = SampleIdentity("acme", 8);
  REQUIRE(client.Commit(half, Payload(2048)) == 0);

  json hit = Lookup(m, half);
  CHECK(hit["ok"] == true);
  CHECK(hit["result"] == "hit");
  CHECK(hit["path"] == AddressOf(half).RelativePath());
  CHECK_FALSE(hit.contains("data"));

  json prefix = Lookup(m, SampleIdentity("acme", 16));
  CHECK(prefix["result"] == "prefix_hit");
  CHECK(prefix["path"] == AddressOf(half).RelativePath());
  CHECK(prefix["valid_length"] == 128);
  // The path it names is a block the engine can open and read whole.
  CHECK(std::holds_alternative<Bytes>(client.Read(half)));

  CacheIdentity fp16 = half;
  fp16.kv_dtype = "fp16";
  json incompatible = Lookup(m, fp16);
  CHECK(incompatible["result"] == "miss");
  CHECK(incompatible["reason"] == "incompatible");

  CacheIdentity other = half;
  other.chain[0] = Hash(200);
  CHECK(Lookup(m, other)["reason"] == "absent");
}

TEST_CASE("Mount: lookup is refused for a tenant the caller is not in") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme");
  REQUIRE(client.Commit(id, Payload(10)) == 0);
  std::string request = "{\"op\":\"lookup\",\"identity\":\"" + HexEncode(EncodePhysicalKey(id)) + "\"}";
  int verdict = AsUser(2000, 2000, [&] {
    json reply = json::parse(Control(m, request), nullptr, false);
    return reply["ok"] == false && reply["errno"] == "EACCES" && !reply.contains("result") ? 0 : 1;
  });
  CHECK(verdict == 0);
}

TEST_CASE("Mount: malformed control requests get a clear error and change nothing") {
  MountedFs m;
  for (const char* bad : {"not json", "[]", "{\"op\":42}", "{\"op\":\"explode\"}",
                          "{\"op\":\"lookup\"}", "{\"op\":\"lookup\",\"identity\":\"zz\"}",
                          "{\"op\":\"lookup\",\"identity\":\"47504b43\"}"}) {
    CAPTURE(bad);
    json reply = json::parse(Control(m, bad), nullptr, false);
    REQUIRE_FALSE(reply.is_discarded());
    CHECK(reply["ok"] == false);
    CHECK(reply["errno"] == "EINVAL");
    CHECK_FALSE(reply["error"].get<std::string>().empty());
  }
  CHECK(ReadText(m.mnt() + "/.gpucache/stats").find(" blocks=0 ") != std::string::npos);
}

TEST_CASE("Mount: stats count blocks, bytes, hits, misses and commits per tenant") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme", 4);
  REQUIRE(client.Commit(id, Payload(5000)) == 0);
  Lookup(m, id);                            // hit
  Lookup(m, SampleIdentity("acme", 16));    // prefix hit
  Lookup(m, SampleIdentity("globex", 4));   // miss for globex
  std::string stats = ReadText(m.mnt() + "/.gpucache/stats");
  CHECK(stats.rfind("epoch ", 0) == 0);
  // No miss: this commit was not preceded by a probe, and a commit through the commit channel
  // sends no lookup (through a rename, the kernel's lookup of the target would be one).
  auto acme = StatsLine(stats, "acme"), globex = StatsLine(stats, "globex");
  for (const char* kv : {"blocks=1", "bytes=5000", "reservations=0", "hits=1", "prefix_hits=1",
                         "misses=0", "commits=1", "checksum_failures=0", "evictions=0"}) {
    CAPTURE(kv);
    CHECK(acme.find(std::string(" ") + kv + " ") != std::string::npos);
  }
  CHECK(globex.find(" blocks=0 ") != std::string::npos);
  CHECK(globex.find(" misses=1 ") != std::string::npos);
  // A tenant member sees only its own tenants.
  CHECK(AsUser(2000, 2000, [&] {
          std::string s = ReadText(m.mnt() + "/.gpucache/stats");
          return s.find("tenant=acme") == std::string::npos && s.find("tenant=globex") != std::string::npos ? 0 : 1;
        }) == 0);
  CHECK(std::stoul(ReadText(m.mnt() + "/.gpucache/epoch")) >= 1);
  CHECK(Errno(::open((m.mnt() + "/.gpucache/stats").c_str(), O_WRONLY)) == EACCES);
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

// Issue 13, defect 8: the design's .gpucache/config view did not exist.
TEST_CASE("Control: .gpucache/config is the effective configuration, for admins only") {
  test::MountedFs m;
  std::string path = m.mnt() + "/.gpucache/config";
  std::string text = test::ReadText(path);
  REQUIRE_FALSE(text.empty());
  Config parsed = ParseConfig(text, "config view");  // itself a valid configuration
  CHECK(parsed.data_dirs == std::vector<std::string>{m.data()});
  CHECK(parsed.tenants.size() == 2);
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0400);
  CHECK(test::AsUser(1000, 1000, [&] { return test::Errno(::open(path.c_str(), O_RDONLY)); }) == EACCES);
  CHECK(test::Errno(::open(path.c_str(), O_WRONLY)) == EACCES);
  // access() agrees with open (review, 2026-12-07: it told a non-admin R_OK).
  CHECK(test::AsUser(1000, 1000, [&] { return test::Errno(::access(path.c_str(), R_OK)); }) == EACCES);
  CHECK(test::AsUser(1000, 1000, [&] { return test::Errno(::access(path.c_str(), F_OK)); }) == 0);  // it is there
  CHECK(test::Errno(::access(path.c_str(), R_OK)) == 0);
}

}  // namespace
}  // namespace gpucache
