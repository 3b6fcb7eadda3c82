#include "fs/config.h"

#include <doctest/doctest.h>

namespace gpucache {
namespace {

TEST_CASE("Config: the built-in defaults parse and are usable") {
  Config c = DefaultConfig();
  CHECK(c.data_dirs == std::vector<std::string>{"/var/lib/gpucache"});
  REQUIRE(c.tenants.size() == 1);
  CHECK(c.tenants[0].name == "default");
  CHECK(c.tenants[0].uids == std::vector<uint32_t>{0});
  CHECK(c.admin_uids == std::vector<uint32_t>{0});
  CHECK_FALSE(c.sync_commits);
  CHECK(c.verify_blocks == "background");  // adr/0016
  // adr/0021: the printed default configuration, and a file that names no policy, run prefix-lru.
  CHECK(c.eviction_policy == "prefix-lru");
  CHECK(Config{}.eviction_policy == "prefix-lru");
  CHECK(kDefaultPolicy == "prefix-lru");
}

TEST_CASE("Config: a full file") {
  Config c = ParseConfig(R"(
data_dir = "/srv/gpucache"
sync_commits = true
verify_blocks = "before_mount"
[limits]
max_block_bytes = 1048576
max_retained_bytes = 1000000000
eviction_policy = "lru"
reservation_lease = 5
[admins]
uids = [0, 5]
gids = [990]
[tenants.zeta]
gids = [3000]
max_retained_bytes = 5000
max_inflight_requests = 2
[tenants.alpha]
uids = [1000, 1001]
[fuse]
entry_timeout = 10
negative_timeout = 0.5
)",
                         "test.toml");
  CHECK(c.data_dirs == std::vector<std::string>{"/srv/gpucache"});
  Config two = ParseConfig("data_dirs = [\"/a\", \"/b\"]\n[tenants.t]\nuids = [1]", "t");
  CHECK(two.data_dirs == std::vector<std::string>{"/a", "/b"});
  CHECK(c.limits.max_block_bytes == 1048576);
  CHECK(c.limits.max_retained_bytes == 1000000000);
  CHECK(c.eviction_policy == "lru");
  CHECK(c.reservation_lease == 5.0);
  ResourceLimits r = ResourceLimitsOf(c);
  CHECK(r.Tenant("zeta").max_retained_bytes == 5000);
  CHECK(r.Tenant("zeta").max_inflight_requests == 2);
  CHECK(r.Tenant("alpha").max_retained_bytes == 0);
  CHECK(c.sync_commits);
  CHECK(c.verify_blocks == "before_mount");
  CHECK(c.admin_gids == std::vector<uint32_t>{990});
  REQUIRE(c.tenants.size() == 2);
  CHECK(c.tenants[0].name == "alpha");  // sorted
  CHECK(c.tenants[1].gids == std::vector<uint32_t>{3000});
  CHECK(c.entry_timeout == 10.0);
  CHECK(c.negative_timeout == 0.5);
}

TEST_CASE("Config: mistakes name the key") {
  auto error = [](const std::string& text) {
    try {
      ParseConfig(text, "t.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  const std::string tenant = "\n[tenants.a]\nuids = [1]\n";
  CHECK(error("data_dir = \"relative\"" + tenant).find("data_dir") != std::string::npos);
  CHECK(error("datadir = \"/x\"" + tenant).find("'datadir': unknown key") != std::string::npos);
  CHECK(error("max_block_bytes = 5" + tenant).find("'max_block_bytes': unknown key") != std::string::npos);
  CHECK(error("[limits]\nmax_block_bytes = -1" + tenant).find("limits.max_block_bytes") != std::string::npos);
  CHECK(error("[limits]\neviction_policy = \"mru\"" + tenant).find("known: prefix-lru, prefix-reuse") != std::string::npos);
  CHECK(error("[tenants.a]\nuids = [1]\nmax_retained_bytes = -5").find("tenants.a.max_retained_bytes") !=
        std::string::npos);
  CHECK(error("sync_commits = \"yes\"" + tenant).find("sync_commits") != std::string::npos);
  CHECK(error("verify_blocks = \"later\"" + tenant).find("verify_blocks") != std::string::npos);
  CHECK(error("data_dir = \"/x\"").find("tenants") != std::string::npos);
  CHECK(error("data_dir = \"/x\"\ndata_dirs = [\"/y\"]" + tenant).find("not both") != std::string::npos);
  CHECK(error("data_dirs = [\"/y\", \"/y\"]" + tenant).find("twice") != std::string::npos);
  CHECK(error("data_dirs = []" + tenant).find("at least one") != std::string::npos);
  CHECK(error("[tenants.Bad]\nuids = [1]").find("tenants.Bad") != std::string::npos);
  CHECK(error("[tenants.a]\n").find("at least one uid or gid") != std::string::npos);
  CHECK(error("[tenants.a]\nuids = [-1]").find("tenants.a.uids") != std::string::npos);
  CHECK(error("[tenants.a]\nuids = [\"root\"]").find("tenants.a.uids") != std::string::npos);
  // Regression (review, 2026-12-07): true and 1.0 were taken as id 1 (uid 1 an admin).
  for (std::string id : {"true", "false", "1.0"}) {
    CAPTURE(id);
    CHECK(error("[admins]\nuids = [0, " + id + "]" + tenant).find("admins.uids") != std::string::npos);
    CHECK(error("[admins]\ngids = [" + id + "]" + tenant).find("admins.gids") != std::string::npos);
    CHECK(error("[tenants.a]\nuids = [" + id + "]").find("tenants.a.uids") != std::string::npos);
    CHECK(error("[tenants.a]\ngids = [" + id + "]").find("tenants.a.gids") != std::string::npos);
  }
  CHECK(error("[admins]\nuid = [0]" + tenant).find("admins.uid") != std::string::npos);
  CHECK(error("[fuse]\nentry_timeout = -1" + tenant).find("fuse.entry_timeout") != std::string::npos);
  CHECK(error("backing_io = \"aio\"" + tenant).find("backing_io") != std::string::npos);
  CHECK(error("[fuse]\npermissions = \"mode\"" + tenant).find("fuse.permissions") != std::string::npos);
  CHECK(error("this is not toml").find("t.toml:1") != std::string::npos);
  // Regression (review, 2026-12-06): relative paths of files re-read at a reload were accepted,
  // and after the daemon detached (to /) every reload failed until a restart.
  CHECK(error("[cold]\ncredentials_file = \"creds\"" + tenant).find("'cold.credentials_file': must be an absolute path") !=
        std::string::npos);
  CHECK(error("[cold]\nkeyring_file = \"./keys\"" + tenant).find("'cold.keyring_file': must be an absolute path") !=
        std::string::npos);
  CHECK_THROWS_AS(LoadConfig("/nonexistent/gpucache.toml"), ConfigError);
}

// Issue 13, defect 6: these passed the check, then the daemon mounted, bumped the epoch and
// exited 1 (listen), or ran with a lease that never expires (nan).
TEST_CASE("Config: refused as start-up refuses them: listen addresses and non-finite numbers") {
  auto error = [](const std::string& text) {
    try {
      ParseConfig(text + "\n[tenants.a]\nuids = [1]\n", "t.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  for (const char* listen : {"localhost:9110", "0.0.0.0:99999", "127.0.0.1:", "127.0.0.1:0",
                             "127.0.0.1:80x", ":9110", "127.0.0.1"}) {
    CAPTURE(listen);
    CHECK(error(std::string("[metrics]\nlisten = \"") + listen + "\"").find("metrics.listen") !=
          std::string::npos);
  }
  CHECK(error("[metrics]\nlisten = \"127.0.0.1:9110\"") == "<accepted>");
  CHECK(error("[metrics]\nlisten = \"\"") == "<accepted>");
  for (const char* value : {"nan", "inf", "-inf", "+nan"}) {
    CAPTURE(value);
    for (const std::string key : {"[limits]\nreservation_lease", "[fuse]\nentry_timeout",
                                  "[fuse]\nnegative_timeout", "[cold]\nflush_interval",
                                  "[cold]\nconnect_timeout", "[cold]\nretention"}) {
      CAPTURE(key);
      CHECK(error(key + " = " + value).find("finite") != std::string::npos);
    }
  }
  CHECK(error("[limits]\nreservation_lease = 1e12").find("limits.reservation_lease") != std::string::npos);
  CHECK(error("[cold]\ntransfer_timeout = 1e7").find("cold.transfer_timeout") != std::string::npos);
  // Regression: under a millisecond was accepted and ran as 0 ms (a write-back loop that never
  // waits), and the effective configuration printed 0.0, which does not parse again.
  CHECK(error("[cold]\nflush_interval = 0.0001").find("cold.flush_interval") != std::string::npos);
  CHECK(error("[cold]\nconnect_timeout = 0.0004").find("cold.connect_timeout") != std::string::npos);
  CHECK(error("[cold]\nflush_interval = 0.001") == "<accepted>");
  // An enabled cold tier seals what it writes: no keyring, no start (adr/0012).
  CHECK(error("[cold]\nenabled = true").find("cold.keyring_file") != std::string::npos);
  CHECK(error("[cold]\nenabled = true\nkeyring_file = \"/etc/k\"\naccept_unsealed = true") == "<accepted>");
  // Known places: 0 turns them off; a negative or absurd bound is named.
  CHECK(error("[cold]\nknown_places = 0") == "<accepted>");
  CHECK(error("[cold]\nknown_places = -1").find("cold.known_places") != std::string::npos);
  CHECK(error("[cold]\nknown_places = 99999999").find("cold.known_places") != std::string::npos);
  // Regressions (review, 2026-12-07). A prefix with an empty, "." or ".." segment passed here
  // and failed every object request (the S3 client refuses such keys).
  for (const char* prefix : {"./", "../", "/", "a//b/", "a/./", "a/../", "//"}) {
    CAPTURE(prefix);
    CHECK(error(std::string("[cold]\nprefix = \"") + prefix + "\"").find("cold.prefix") != std::string::npos);
  }
  for (const char* prefix : {"", "a/", "gpucache/prod.v2/", "a.b/c_d-e/"}) {
    CAPTURE(prefix);
    CHECK(error(std::string("[cold]\nprefix = \"") + prefix + "\"") == "<accepted>");
  }
  // A NUL cut the path short where the daemon used it (the store went to /x/data); any
  // control character is refused, in every string and list of strings.
  CHECK(error("data_dir = \"/x/data\\u0000-not-used\"").find("'data_dir': contains a control character") !=
        std::string::npos);
  CHECK(error("data_dirs = [\"/x/a\", \"/x/b\\n\"]").find("'data_dirs': contains a control character") !=
        std::string::npos);
  CHECK(error("[cold]\nkeyring_file = \"/etc/k\\u0000x\"").find("cold.keyring_file") != std::string::npos);
  CHECK(error("[cold]\ncredentials_file = \"/etc/c\\tx\"").find("cold.credentials_file") != std::string::npos);
  // A lease of 1e-300 s passed "> 0" and ran as 0 ns.
  CHECK(error("[limits]\nreservation_lease = 1e-300").find("limits.reservation_lease") != std::string::npos);
  CHECK(error("[limits]\nreservation_lease = 0.001") == "<accepted>");
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

TEST_CASE("Config: kernel permissions need access that mode bits can express") {
  auto error = [](const std::string& text) {
    try {
      ParseConfig("[fuse]\npermissions = \"kernel\"\n" + text, "t.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  // One owner uid (root does not count: it bypasses mode bits) and one group per tenant.
  CHECK(error("[tenants.a]\nuids = [0, 1000]\ngids = [3000]") == "<accepted>");
  CHECK(error("[tenants.a]\ngids = [3000]\n[tenants.b]\nuids = [2000]") == "<accepted>");
  CHECK(error("[tenants.a]\nuids = [1000, 1001]").find("tenants.a.uids") != std::string::npos);
  CHECK(error("[tenants.a]\ngids = [1, 2]").find("tenants.a.gids") != std::string::npos);
  // Admins other than root could not walk into tenants the kernel checks.
  CHECK(error("[admins]\nuids = [0, 5]\n[tenants.a]\nuids = [1]").find("admins.uids") != std::string::npos);
  CHECK(error("[admins]\ngids = [990]\n[tenants.a]\nuids = [1]").find("admins.gids") != std::string::npos);
  // The default stays the daemon's own check, which takes any lists.
  Config c = ParseConfig("[tenants.a]\nuids = [1000, 1001]\ngids = [1, 2]", "t.toml");
  CHECK(c.permissions == "daemon");
  CHECK_FALSE(c.KernelPermissions());
  Config k = ParseConfig("[fuse]\npermissions = \"kernel\"\n[tenants.a]\nuids = [7]", "t.toml");
  CHECK(k.KernelPermissions());
  CHECK(ParseConfig(EffectiveConfigText(k), "effective").KernelPermissions());
}

TEST_CASE("Config: the effective configuration is itself a valid configuration with the same values") {
  Config c = ParseConfig(R"(
data_dirs = ["/a", "/b"]
[limits]
max_retained_bytes = 77
eviction_policy = "lru"
[tenants.t]
uids = [5]
gids = [6]
max_inflight_requests = 3
)",
                         "t.toml");
  Config again = ParseConfig(EffectiveConfigText(c), "effective");
  CHECK(again.data_dirs == c.data_dirs);
  CHECK(again.limits.max_retained_bytes == 77);
  CHECK(again.limits.max_block_bytes == c.limits.max_block_bytes);
  CHECK(again.eviction_policy == "lru");
  CHECK(again.reservation_lease == c.reservation_lease);
  REQUIRE(again.tenants.size() == 1);
  CHECK(again.tenants[0].uids == std::vector<uint32_t>{5});
  CHECK(again.tenants[0].limits.max_inflight_requests == 3);
  CHECK(again.admin_uids == c.admin_uids);
}

// A configuration of one tenant and the `[ram]` text given; RamError: why it is refused.
Config ParseRam(const std::string& ram) { return ParseConfig(ram + "\n[tenants.a]\nuids = [1]\n", "t.toml"); }
std::string RamError(const std::string& ram) {
  try {
    ParseRam(ram);
  } catch (const ConfigError& e) {
    return std::string(e.what());
  }
  return std::string("<accepted>");
}

TEST_CASE("Config: [ram] bytes is 0 (off) or 1 MiB up to the machine's memory, 1/16 of it when left out") {
  auto parse = ParseRam;
  auto error = RamError;
  REQUIRE(DefaultRamBytes() > 0);  // /proc/meminfo is there
  CHECK(DefaultRamBytes() % (1 << 20) == 0);
  CHECK(parse("").ram_bytes == DefaultRamBytes());
  CHECK(parse("[ram]\n").ram_bytes == DefaultRamBytes());
  CHECK(parse("[ram]\nbytes = 0").ram_bytes == 0);
  CHECK(parse("[ram]\nbytes = 1048576").ram_bytes == 1048576);
  CHECK(error("[ram]\nbytes = -1").find("ram.bytes") != std::string::npos);
  CHECK(error("[ram]\nbytes = 4096").find("at least 1048576") != std::string::npos);
  CHECK(error("[ram]\nbytes = \"4G\"").find("integer number of bytes") != std::string::npos);
  CHECK(error("[ram]\nbytes = 1.5e9").find("integer number of bytes") != std::string::npos);
  CHECK(error("[ram]\nbytes = 9223372036854775807").find("more than this machine's memory") !=
        std::string::npos);
  CHECK(error("[ram]\nsize = 1048576").find("'ram.size': unknown key") != std::string::npos);
  CHECK(error("ram = 5").find("'ram': must be a table") != std::string::npos);
  Config c = parse("[ram]\nbytes = 3145728");
  CHECK(ParseConfig(EffectiveConfigText(c), "effective").ram_bytes == 3145728);
  CHECK(DefaultConfig().ram_bytes == DefaultRamBytes());
}

TEST_CASE("Config: [ram] promote is \"read\" (the default) or \"commit\"") {
  auto parse = ParseRam;
  auto error = RamError;
  CHECK(parse("").ram_promote == "read");
  CHECK_FALSE(parse("").PromoteOnCommit());
  CHECK(parse("[ram]\npromote = \"read\"").ram_promote == "read");
  CHECK(parse("[ram]\npromote = \"commit\"").PromoteOnCommit());
  CHECK(error("[ram]\npromote = \"write\"").find("'ram.promote': must be \"read\" or \"commit\"") != std::string::npos);
  CHECK(error("[ram]\npromote = true").find("ram.promote") != std::string::npos);
  Config c = parse("[ram]\npromote = \"commit\"");
  CHECK(ParseConfig(EffectiveConfigText(c), "effective").PromoteOnCommit());
  CHECK(DefaultConfig().ram_promote == "read");
}

TEST_CASE("Config: [cold] parses into the tier's options, and its effective text parses back") {
  Config c = ParseConfig(R"(
[tenants.t]
uids = [5]
[cold]
enabled = true
endpoint = "http://127.0.0.1:7480"
bucket = "kv"
region = "eu-1"
credentials_file = "/etc/gpucache/s3"
prefix = "p/"
write_back = "manual"
pack_target_bytes = 1000
pack_max_blocks = 7
flush_interval = 0.25
max_jobs = 9
max_bytes = 99
concurrency = 3
max_attempts = 2
retry_base_delay = 0.1
retry_max_delay = 1.5
redrive_interval = 0
refill_workers = 5
refill_budget_bytes = 4096
connect_timeout = 3
transfer_timeout = 45.5
retention = 0.5
retired_tenants = ["old", "gone"]
keyring_file = "/etc/gpucache/keys"
accept_unsealed = true
known_places = 12
)",
                         "t.toml");
  auto check = [](const cold::ColdOptions& k) {
    CHECK(k.enabled);
    CHECK(k.s3.endpoint == "http://127.0.0.1:7480");
    CHECK(k.s3.bucket == "kv");
    CHECK(k.s3.region == "eu-1");
    CHECK(k.s3.credentials_file == "/etc/gpucache/s3");
    CHECK(k.s3.access_key.empty());  // never from the file
    CHECK(k.s3.connect_timeout_ms == 3000);
    CHECK(k.s3.transfer_timeout_ms == 45500);
    CHECK(k.tier.prefix == "p/");
    CHECK(k.tier.write_back == cold::WriteBack::kManual);
    CHECK(k.tier.pack.target_bytes == 1000);
    CHECK(k.tier.pack.max_blocks == 7);
    CHECK(k.tier.flush_interval_ms == 250);
    CHECK(k.tier.sink.max_jobs == 9);
    CHECK(k.tier.sink.max_bytes == 99);
    CHECK(k.tier.sink.concurrency == 3);
    CHECK(k.tier.sink.max_attempts == 2);
    CHECK(k.tier.sink.backoff_base_ms == 100);
    CHECK(k.tier.sink.backoff_max_ms == 1500);
    CHECK(k.tier.sink.redrive_interval_ms == 0);
    CHECK(k.tier.refill_workers == 5);
    CHECK(k.tier.refill_budget_bytes == 4096);
    CHECK(k.tier.retention_ns == 500'000'000);
    CHECK(k.tier.retired_tenants == std::set<std::string>{"gone", "old"});
    CHECK(k.tier.accept_unsealed);
    CHECK(k.tier.known_places == 12);
    CHECK(k.keyring_file == "/etc/gpucache/keys");
  };
  check(c.cold);
  std::string text = EffectiveConfigText(c);
  CHECK(text.find("flush_interval = 0.25") != std::string::npos);
  CHECK(text.find("write_back = 'manual'") != std::string::npos);
  CHECK(text.find("access_key") == std::string::npos);
  check(ParseConfig(text, "effective").cold);
}

}  // namespace
}  // namespace gpucache
