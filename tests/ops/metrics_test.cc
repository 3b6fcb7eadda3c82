// Metrics: the same registry through .gpucache/metrics and over HTTP, in Prometheus text format.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <sstream>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;

int FreePort() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// The endpoint starts right after the mount is up: retry the connection for a while.
std::string HttpGet(int port, const std::string& path) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int s = -1;
  for (int i = 0; i < 100; ++i, ::usleep(20000)) {
    s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    ::close(s);
    s = -1;
  }
  if (s < 0) return "";
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)::write(s, req.data(), req.size());
  std::string out;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(s, buf, sizeof buf)) > 0) out.append(buf, n);
  ::close(s);
  return out;
}

// Parses the exposition format strictly: every line is a comment (# HELP / # TYPE) or a sample
// `name{labels} value`; returns samples keyed by "name{labels}".
std::map<std::string, double> Parse(const std::string& text) {
  static const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  static const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, comment)) continue;
    REQUIRE_MESSAGE(std::regex_match(line, m, sample), line);
    out[m[1].str() + m[2].str()] = std::stod(m[3].str());
  }
  return out;
}

TEST_CASE("Metrics: the file and the HTTP endpoint expose the same registry") {
  int port = FreePort();
  std::string body = TestConfig();
  body.replace(body.find("listen = \"\""), std::string("listen = \"\"").size(),
               "listen = \"127.0.0.1:" + std::to_string(port) + "\"");
  MountedFs m(body);
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(100000)) == 0);
  REQUIRE(std::holds_alternative<Bytes>(client.Read(id)));

  std::string http = HttpGet(port, "/metrics");
  REQUIRE(http.find(" 200 OK") != std::string::npos);
  CHECK(http.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  auto scraped = Parse(http.substr(http.find("\r\n\r\n") + 4));
  auto file = Parse(ReadText(m.mnt() + "/.gpucache/metrics"));
  for (auto* samples : {&scraped, &file}) {
    auto& s = *samples;
    CHECK(s["gpucache_commits_total{tenant=\"acme\"}"] == 1);
    CHECK(s["gpucache_blocks{tenant=\"acme\"}"] == 1);
    CHECK(s["gpucache_retained_bytes{tenant=\"acme\"}"] == 100000);
    CHECK(s["gpucache_written_bytes_total"] == 100000);
    CHECK(s["gpucache_read_bytes_total"] >= 100000);
    CHECK(s["gpucache_epoch"] >= 1);
    CHECK(s.count("gpucache_misses_total{tenant=\"acme\",reason=\"incompatible\"}") == 1);
    CHECK(s["gpucache_fuse_op_seconds_count{op=\"rename\"}"] >= 1);
    CHECK(s["gpucache_fuse_op_seconds_bucket{op=\"read\",le=\"+Inf\"}"] ==
          s["gpucache_fuse_op_seconds_count{op=\"read\"}"]);
  }
  CHECK(HttpGet(port, "/other").find(" 404 Not Found") != std::string::npos);
  // A tenant member reads only its own tenants from the file.
  CHECK(AsUser(2000, 2000, [&] {
          return ReadText(m.mnt() + "/.gpucache/metrics").find("tenant=\"acme\"") == std::string::npos ? 0 : 1;
        }) == 0);
}

TEST_CASE("Metrics: a taken port stops start-up with a clear error and nothing stays mounted") {
  int port = FreePort();
  int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(holder, 1) == 0);
  TempDir tmp;
  std::string cfg = tmp.path() + "/c.toml", mnt = tmp.path() + "/mnt", log = tmp.path() + "/log";
  ::mkdir(mnt.c_str(), 0755);
  std::ofstream(cfg) << "data_dir = \"" << tmp.path() << "/d\"\n[metrics]\nlisten = \"127.0.0.1:"
                     << port << "\"\n[tenants.t]\nuids = [0]\n";
  int rc = std::system((std::string(GPUCACHEFS_BIN) + " " + cfg + " " + mnt + " -f 2>" + log).c_str());
  CHECK(rc != 0);
  CHECK(ReadText(log).find("cannot serve metrics on 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  struct statfs fs;
  REQUIRE(::statfs(mnt.c_str(), &fs) == 0);
  CHECK(fs.f_type != 0x65735546);
  ::close(holder);
}

}  // namespace
}  // namespace gpucache
