// Metrics as their consumers parse them: both endpoints through `promtool check metrics`
// (the Prometheus text format) and the HTTP endpoint, negotiated, through the OpenMetrics
// parser of prometheus_client; and what the counters count (docs/metrics.md).
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/xattr.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "tests/mount/mount_helpers.h"
#include "tests/support/http_get.h"

namespace gpucache {
namespace {

using namespace test;

// The whole HTTP response (headers and body) to GET /metrics with this Accept header.
std::string Scrape(int port, const std::string& accept) { return HttpGet(port, "/metrics", accept); }

std::string Body(const std::string& response) { return response.substr(response.find("\r\n\r\n") + 4); }

// Runs `command` with `text` on its stdin; returns its exit status, its output in `*output`.
int Check(const std::string& command, const std::string& text, const TempDir& tmp, std::string* output) {
  std::string in = tmp.path() + "/in", out = tmp.path() + "/out";
  std::ofstream(in) << text;
  int rc = std::system((command + " < " + in + " > " + out + " 2>&1").c_str());
  *output = ReadText(out);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

constexpr char kPromtool[] = "promtool check metrics";
// Debian's python3 (the package python3-prometheus-client), not whatever python3 is first.
constexpr char kOpenMetricsParser[] =
    "/usr/bin/python3 -c 'import sys\n"
    "from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n"
    "print(len(list(p(sys.stdin.read()))), \"families\")'";
constexpr char kTextParser[] =
    "/usr/bin/python3 -c 'import sys\n"
    "from prometheus_client.parser import text_string_to_metric_families as p\n"
    "print(len(list(p(sys.stdin.read()))), \"families\")'";

// Samples keyed by "name{labels}" from the text format.
std::map<std::string, double> Samples(const std::string& text) {
  static const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.empty() || line[0] == '#') continue;
    REQUIRE_MESSAGE(std::regex_match(line, m, sample), line);
    out[m[1].str() + m[2].str()] = std::stod(m[3].str());
  }
  return out;
}

std::string WithPort(int port) {
  std::string body = TestConfig();
  std::string off = "listen = \"\"";
  return body.replace(body.find(off), off.size(), "listen = \"127.0.0.1:" + std::to_string(port) + "\"");
}

TEST_CASE("Metrics: promtool and the OpenMetrics parser accept both endpoints") {
  int port = FreeLoopbackPort();
  MountedFs m(WithPort(port));
  TempDir tmp;
  MountClient client(m.mnt());
  REQUIRE(client.Commit(SampleIdentity(), Payload(100000)) == 0);
  REQUIRE(std::holds_alternative<Bytes>(client.Read(SampleIdentity())));
  // Refusals of several kinds, so that their labelled series are there to be checked.
  CHECK(AsUser(2000, 2000, [&] { return client.Commit(SampleIdentity("acme", 3), Payload(10)); }) == EACCES);
  CHECK(Errno(::mkdir((m.mnt() + "/acme/not a namespace").c_str(), 0770)) != 0);
  // Linux calls ENOTSUP's value EOPNOTSUPP; the label says ENOTSUP, as the protocol does.
  CHECK(Errno(::removexattr((m.mnt() + "/acme").c_str(), "user.not.ours")) == ENOTSUP);

  std::string output;
  std::string text = Scrape(port, "");
  REQUIRE(text.find(" 200 OK") != std::string::npos);
  CHECK(text.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK_MESSAGE(Check(kPromtool, Body(text), tmp, &output) == 0, output);
  CHECK_MESSAGE(Check(kTextParser, Body(text), tmp, &output) == 0, output);

  // What Prometheus itself sends: OpenMetrics first.
  std::string om = Scrape(port,
      "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
      "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1");
  CHECK(om.find("Content-Type: application/openmetrics-text; version=1.0.0") != std::string::npos);
  CHECK(Body(om).ends_with("# EOF\n"));
  CHECK_MESSAGE(Check(kOpenMetricsParser, Body(om), tmp, &output) == 0, output);
  // The text format refuses what OpenMetrics needs and the reverse: negotiation matters.
  CHECK(Check(kOpenMetricsParser, Body(text), tmp, &output) != 0);
  // A client that prefers the text format gets it.
  CHECK(Scrape(port, "text/plain;q=1, application/openmetrics-text;q=0.5")
            .find("Content-Type: text/plain; version=0.0.4") != std::string::npos);

  std::string file = ReadText(m.mnt() + "/.gpucache/metrics");
  CHECK_MESSAGE(Check(kPromtool, file, tmp, &output) == 0, output);
  CHECK_MESSAGE(Check(kTextParser, file, tmp, &output) == 0, output);

  auto s = Samples(Body(text));
  CHECK(s["gpucache_build_info{version=\"" GPUCACHE_TEST_VERSION "\"}"] == 1);
  CHECK(s["process_open_fds"] > 0);
  CHECK(s["process_max_fds"] >= s["process_open_fds"]);
  CHECK(s["process_resident_memory_bytes"] > 0);
  CHECK(s["process_start_time_seconds"] > 1.5e9);
  CHECK(s.count("process_cpu_seconds_total") == 1);
  CHECK(s["gpucache_data_dir_isolated{dir=\"" + m.data() + "\"}"] == 0);
  CHECK(s["gpucache_data_dir_free_bytes{dir=\"" + m.data() + "\"}"] > 0);
  CHECK(s["gpucache_refusals_total{tenant=\"acme\",errno=\"EACCES\",reason=\"access denied\"}"] >= 1);
  CHECK(s["gpucache_refusals_total{tenant=\"acme\",errno=\"ENOTSUP\",reason=\"not supported\"}"] == 1);
  CHECK(s["gpucache_written_bytes_total{tenant=\"acme\"}"] == 100000);
  CHECK(s["gpucache_read_bytes_total{tenant=\"acme\"}"] == 100000);
  CHECK(s["gpucache_backing_reads_total{path=\"pread\"}"] >= 1);
  CHECK(s["gpucache_backing_errors_total{op=\"read\"}"] == 0);
  CHECK(s.count("gpucache_backing_errors_total{op=\"metadata\"}") == 1);
  // A tenant member's file shows neither other tenants nor the data directories, nor the whole
  // daemon's series, which count every tenant's activity (review, 2026-12-07: a uid in no
  // tenant watched the FUSE op counts rise with another tenant's commits).
  CHECK(file.find("gpucache_fuse_op_seconds_count{") != std::string::npos);  // the admin's file
  CHECK(AsUser(2000, 2000, [&] {
          std::string theirs = ReadText(m.mnt() + "/.gpucache/metrics");
          int leaks = 0;
          for (const char* series : {"tenant=\"acme\"", "gpucache_data_dir", "gpucache_fuse_op_seconds",
                                     "process_cpu_seconds_total", "gpucache_backing_reads_total",
                                     "gpucache_log_lines_suppressed_total"}) {
            if (theirs.find(series) != std::string::npos) leaks |= 2;
          }
          return theirs.find("gpucache_epoch") == std::string::npos ? 1 : leaks;
        }) == 0);
}

// Review (2026-12-07): the endpoint showed every tenant's counters to any local user, with no
// way to ask for more than a loopback address.
TEST_CASE("Metrics: with a bearer token, /metrics answers only requests that carry it") {
  int port = FreeLoopbackPort();
  TempDir tmp;
  const std::string token_file = tmp.path() + "/token";
  std::ofstream(token_file) << "  s3cr3t-T0ken\n";
  std::string config = WithPort(port);
  config.replace(config.find("[metrics]\n"), 10, "[metrics]\nbearer_token_file = \"" + token_file + "\"\n");
  MountedFs m(config);
  MountClient client(m.mnt());
  REQUIRE(client.Commit(SampleIdentity(), Payload(1000)) == 0);
  const std::string none = HttpGet(port, "/metrics");
  CHECK(none.find(" 401 ") != std::string::npos);
  CHECK(none.find("WWW-Authenticate: Bearer") != std::string::npos);
  CHECK(none.find("tenant=") == std::string::npos);
  for (const char* wrong : {"Bearer s3cr3t-T0kem", "Bearer s3cr3t-T0ken-and-more", "Basic s3cr3t-T0ken"}) {
    CAPTURE(wrong);
    CHECK(HttpGet(port, "/metrics", "", std::string("Authorization: ") + wrong + "\r\n").find(" 401 ") !=
          std::string::npos);
  }
  const std::string ok = HttpGet(port, "/metrics", "", "Authorization: Bearer s3cr3t-T0ken\r\n");
  CHECK(ok.find(" 200 OK") != std::string::npos);
  CHECK(ok.find("gpucache_blocks{tenant=\"acme\"} 1") != std::string::npos);
  CHECK(HttpGet(port, "/healthz").find(" 200 OK") != std::string::npos);  // liveness stays open
  CHECK(HttpGet(port, "/metrics", "", "Authorization: bEaReR s3cr3t-T0ken\r\n").find(" 200 OK") !=
        std::string::npos);  // the scheme in any case (RFC 7235)
  // Rotated in place, as Prometheus re-reads its credentials_file: taken at the next reload.
  std::ofstream(token_file) << "n3w-t0ken\n";
  REQUIRE(::kill(m.pid(), SIGHUP) == 0);
  for (int i = 0; i < 500 && m.Log().find("metrics bearer token read again") == std::string::npos; ++i) {
    ::usleep(20000);
  }
  CHECK(HttpGet(port, "/metrics", "", "Authorization: Bearer n3w-t0ken\r\n").find(" 200 OK") != std::string::npos);
  CHECK(HttpGet(port, "/metrics", "", "Authorization: Bearer s3cr3t-T0ken\r\n").find(" 401 ") != std::string::npos);
}

TEST_CASE("Metrics: a bearer token file that is missing or empty refuses the start") {
  TempDir tmp;
  std::ofstream(tmp.path() + "/empty") << " \n";
  auto check_config = [&](std::string config, const std::string& file) {
    config.replace(config.find("[metrics]\n"), 10, "[metrics]\nbearer_token_file = \"" + file + "\"\n");
    const std::string path = tmp.path() + "/c.toml", out = tmp.path() + "/out";
    std::ofstream(path) << config;
    int rc = std::system((GPUCACHEFS_BIN " --check-config " + path + " > " + out + " 2>&1").c_str());
    return std::make_pair(WEXITSTATUS(rc), ReadText(out));
  };
  for (const std::string& file : {tmp.path() + "/missing", tmp.path() + "/empty"}) {
    CAPTURE(file);
    auto [rc, out] = check_config(WithPort(FreeLoopbackPort()), file);
    CHECK(rc == 78);
    CHECK(out.find("metrics.bearer_token_file") != std::string::npos);
  }
  // With the endpoint off the file is not used, so not read.
  CHECK(check_config(TestConfig(), tmp.path() + "/missing").first == 0);
}

TEST_CASE("Metrics: refusals count refusals only, each tenant's limits are gauges, a refused fill is logged") {
  MountedFs m(TestConfig("", "max_retained_bytes = 60000"));
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme", 3);
  REQUIRE(client.Commit(id, Payload(50000)) == 0);
  // Pinned: not evictable, so the next fill meets the quota instead of evicting it.
  REQUIRE(::setxattr(client.PathOf(id).c_str(), "user.gpucache.pinned", "1", 1, 0) == 0);
  auto refusals = [&] {
    double n = 0;
    for (const auto& [k, v] : Samples(ReadText(m.mnt() + "/.gpucache/metrics"))) {
      if (k.rfind("gpucache_refusals_total{", 0) == 0) n += v;
    }
    return n;
  };
  double before = refusals();
  // Misses and `ls -la` (getxattr of security attributes gpucache does not keep) are answers.
  struct stat st;
  for (int i = 0; i < 5; i++) CHECK(::stat(client.PathOf(SampleIdentity("acme", 40 + i)).c_str(), &st) != 0);
  CHECK(std::system(("ls -la " + NsDir(m, id) + " >/dev/null").c_str()) == 0);
  // Nor is an attribute a node lacks (ENODATA): a joiner's probe of a fill never made, a name
  // a block does not have.
  char buf[64];
  std::string fill = "user.gpucache.fill." + AddressOf(SampleIdentity("acme", 50)).block;
  CHECK(::getxattr(NsDir(m, id).c_str(), fill.c_str(), buf, sizeof buf) < 0);
  CHECK(errno == ENODATA);
  CHECK(::getxattr(client.PathOf(id).c_str(), "user.gpucache.nope", buf, sizeof buf) < 0);
  CHECK(errno == ENODATA);
  CHECK(refusals() == before);
  // A fill over the quota is a refusal, counted and logged with its tenant and errno.
  CHECK(client.Commit(SampleIdentity("acme", 4), Payload(50000)) == EDQUOT);
  CHECK(refusals() > before);
  CHECK(m.Log().find("refused a fill of tenant 'acme' (uid 0) with EDQUOT") != std::string::npos);
  auto s = Samples(ReadText(m.mnt() + "/.gpucache/metrics"));
  CHECK(s["gpucache_limit{tenant=\"acme\",limit=\"max_retained_bytes\"}"] == 60000);
  CHECK(s["gpucache_limit{tenant=\"\",limit=\"max_block_bytes\"}"] > 0);  // the global one, for an admin
}

// Regression (observability review, 2026-12-06): a data directory whose statvfs failed lost
// its free-space series, so an alert on low free space resolved just as the device went.
TEST_CASE("Metrics: a data directory that does not answer statvfs says so") {
  int port = FreeLoopbackPort();
  MountedFs m(WithPort(port));
  const std::string dir = "gpucache_data_dir_statvfs_ok{dir=\"" + m.data() + "\"}";
  const std::string free = "gpucache_data_dir_free_bytes{dir=\"" + m.data() + "\"}";
  auto s = Samples(Body(Scrape(port, "")));
  CHECK(s.count(dir) == 1);
  CHECK(s[dir] == 1);
  CHECK(s.count(free) == 1);
  // The path moved away: statvfs fails (ENOENT) until it is back.
  REQUIRE(::rename(m.data().c_str(), (m.data() + ".moved").c_str()) == 0);
  s = Samples(Body(Scrape(port, "")));
  REQUIRE(::rename((m.data() + ".moved").c_str(), m.data().c_str()) == 0);
  CHECK(s.count(dir) == 1);
  CHECK(s[dir] == 0);
  CHECK(s.count(free) == 0);
}

// Regression (observability review, 2026-12-06): one limiter per errno named only the first
// tenant refused in each 10 s; another tenant refused the same way was only "N more".
TEST_CASE("Metrics: refused fills of two tenants are logged for each, with the caller's uid") {
  MountedFs m(TestConfig("", "max_retained_bytes = 60000", "max_retained_bytes = 60000"));
  MountClient client(m.mnt());
  CHECK(client.Commit(SampleIdentity("acme", 1), Payload(70000)) == EDQUOT);
  CHECK(AsUser(2000, 2000, [&] { return client.Commit(SampleIdentity("globex", 1), Payload(70000)); }) == EDQUOT);
  CHECK(m.Log().find("refused a fill of tenant 'acme' (uid 0) with EDQUOT") != std::string::npos);
  CHECK(m.Log().find("refused a fill of tenant 'globex' (uid 2000) with EDQUOT") != std::string::npos);
}

TEST_CASE("Metrics: opens count every open, lookups and reads only what the kernel did not serve") {
  // fuse.permissions = "kernel": entries inside a tenant are cached (with daemon checks every
  // walk there comes to the daemon, and each stat below would count).
  MountedFs m(TestConfig("", "gids = [3000]") + "permissions = \"kernel\"\n");
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(50000);
  REQUIRE(client.Commit(id, payload) == 0);
  std::string path = client.PathOf(id), absent = client.PathOf(SampleIdentity("acme", 9));
  auto before = Samples(ReadText(m.mnt() + "/.gpucache/metrics"));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(std::get<Bytes>(client.Read(id)) == payload);
    struct stat st;
    CHECK(::stat(absent.c_str(), &st) != 0);
  }
  auto after = Samples(ReadText(m.mnt() + "/.gpucache/metrics"));
  auto delta = [&](const std::string& k) { return after[k] - before[k]; };
  // Every open reaches the daemon.
  CHECK(delta("gpucache_block_opens_total{tenant=\"acme\"}") == 3);
  // The block's entry and pages were cached: at most the first lookup and read reach it.
  CHECK(delta("gpucache_hits_total{tenant=\"acme\"}") <= 1);
  CHECK(delta("gpucache_block_reads_total{tenant=\"acme\"}") >= 1);
  CHECK(delta("gpucache_read_bytes_total{tenant=\"acme\"}") <= double(payload.size()));
  // The absent block's negative entry was cached: three stats, one miss.
  CHECK(delta("gpucache_misses_total{tenant=\"acme\",reason=\"absent\"}") == 1);
}

TEST_CASE("Metrics: with backing_io = uring every block read is counted under one path, and the pool is shown") {
  // No RAM tier: its copies are read from the block files too (backing reads no FUSE read
  // counts), and this case checks that each FUSE read is counted once.
  MountedFs m("backing_io = \"uring\"\n[ram]\nbytes = 0\n" + TestConfig());
  MountClient client(m.mnt());
  for (uint8_t i = 1; i <= 3; ++i) {
    CacheIdentity id = SampleIdentity("acme", i);
    REQUIRE(client.Commit(id, Payload(200000, i)) == 0);
    REQUIRE(std::get<Bytes>(client.Read(id)) == Payload(200000, i));
  }
  auto s = Samples(ReadText(m.mnt() + "/.gpucache/metrics"));
  double reads = s["gpucache_block_reads_total{tenant=\"acme\"}"];
  CHECK(reads >= 3);
  // io_uring where the kernel allows it, the page cache or pread otherwise: each read once.
  CHECK(s["gpucache_backing_reads_total{path=\"io_uring\"}"] + s["gpucache_backing_reads_total{path=\"page_cache\"}"] +
            s["gpucache_backing_reads_total{path=\"pread\"}"] == reads);
  CHECK(s.count("gpucache_io_pool_slots{state=\"free\"}") == 1);
  CHECK(s["gpucache_io_pool_slots{state=\"in_use\"}"] == 0);  // every read returned its slot
  CHECK(s["gpucache_io_pool_slots{state=\"quarantined\"}"] == 0);
  CHECK(m.Log().find("backing I/O: ") != std::string::npos);
}

}  // namespace
}  // namespace gpucache
