// S3Client's failure classification through tests/cold/harness/fault_proxy.py in front of the
// real server: each case injects one fault into every request and checks kind, code and the
// ambiguity flag. Skipped (with a MESSAGE) when GPUCACHE_S3_ENV_FILE is unset.
#include <doctest/doctest.h>

#include "cold/s3_client.h"
#include "tests/cold/rgw_env.h"

namespace gpucache::cold {
namespace {

using testing::Client;
using testing::FaultProxy;
using testing::RunPrefix;
using testing::ServerOptions;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

S3Options Through(const S3Options& server, const FaultProxy& proxy) {
  S3Options o = server;
  o.endpoint = proxy.endpoint();
  o.transfer_timeout_ms = 1500;
  return o;
}

TEST_CASE("S3Client faults: no fault, requests pass the proxy unchanged") {
  auto options = ServerOptions();
  if (!options) return;
  FaultProxy proxy(options->endpoint, "");
  auto client = Client(Through(*options, proxy));
  const std::string key = RunPrefix() + "proxy/clean";
  std::vector<uint8_t> body(2 << 20, 7);  // above 1 MiB: curl sends Expect: 100-continue
  REQUIRE(client->Put(key, body).ok());
  auto got = client->Get(key, 4 << 20);
  REQUIRE(got.ok());
  CHECK(got.value() == body);
  CHECK(client->Delete(key).ok());
}

TEST_CASE("S3Client faults: HTTP errors from the server side are kTemporary") {
  auto options = ServerOptions();
  if (!options) return;
  struct Case {
    const char* fault;
    int status;
    const char* code;
  };
  for (Case c : {Case{"500", 500, "InternalError"}, Case{"503", 503, "ServiceUnavailable"},
                 Case{"slowdown", 503, "SlowDown"}, Case{"429", 429, "SlowDown"}}) {
    CAPTURE(c.fault);
    FaultProxy proxy(options->endpoint, c.fault);
    auto client = Client(Through(*options, proxy));
    auto put = client->Put(RunPrefix() + "proxy/http", Bytes("data"));
    REQUIRE_FALSE(put.ok());
    CHECK(put.error().kind == ObjectErrorKind::kTemporary);
    CHECK(put.error().http_status == c.status);
    CHECK(put.error().code == c.code);
    // 5xx: the server may have acted, so a failed Put is ambiguous; a 4xx (429) is a refusal.
    CHECK(put.error().ambiguous == (c.status >= 500));
    auto get = client->Get(RunPrefix() + "proxy/http", 100);
    REQUIRE_FALSE(get.ok());
    CHECK(get.error().kind == ObjectErrorKind::kTemporary);
    CHECK_FALSE(get.error().ambiguous);                    // reads are never ambiguous
    auto head = client->Head(RunPrefix() + "proxy/http");  // no body: status alone decides
    REQUIRE_FALSE(head.ok());
    CHECK(head.error().kind == ObjectErrorKind::kTemporary);
  }
}

TEST_CASE("S3Client faults: a reset connection is kTemporary and ambiguous for Put/Delete") {
  auto options = ServerOptions();
  if (!options) return;
  FaultProxy proxy(options->endpoint, "reset");
  auto client = Client(Through(*options, proxy));
  auto put = client->Put(RunPrefix() + "proxy/reset", Bytes("data"));
  REQUIRE_FALSE(put.ok());
  CHECK(put.error().kind == ObjectErrorKind::kTemporary);
  CHECK(put.error().http_status == 0);
  CHECK(put.error().ambiguous);
  MESSAGE("reset: ", put.error().code, ": ", put.error().message);
  auto del = client->Delete(RunPrefix() + "proxy/reset");
  REQUIRE_FALSE(del.ok());
  CHECK(del.error().kind == ObjectErrorKind::kTemporary);
  CHECK(del.error().ambiguous);
  auto get = client->GetRange(RunPrefix() + "proxy/reset", 0, 10);
  REQUIRE_FALSE(get.ok());
  CHECK(get.error().kind == ObjectErrorKind::kTemporary);
}

TEST_CASE("S3Client faults: a stalled server times out as kTemporary") {
  auto options = ServerOptions();
  if (!options) return;
  FaultProxy proxy(options->endpoint, "stall", 30);
  S3Options o = Through(*options, proxy);
  o.transfer_timeout_ms = 800;
  auto client = Client(o);
  auto t0 = std::chrono::steady_clock::now();
  auto put = client->Put(RunPrefix() + "proxy/stall", Bytes("data"));
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(put.ok());
  CHECK(put.error().kind == ObjectErrorKind::kTemporary);
  CHECK(put.error().code == "CURLE_OPERATION_TIMEDOUT");
  CHECK(put.error().ambiguous);  // the timeout's own code proves the bound applied
  MESSAGE("stall reported after ", ms, " ms (transfer timeout 800 ms)");
  auto get = client->Get(RunPrefix() + "proxy/stall", 100);
  REQUIRE_FALSE(get.ok());
  CHECK(get.error().kind == ObjectErrorKind::kTemporary);
  CHECK_FALSE(get.error().ambiguous);
}

TEST_CASE("S3Client faults: a truncated reply is kTemporary, and the Put it answered did happen") {
  auto options = ServerOptions();
  if (!options) return;
  auto direct = Client(*options);
  const std::string key = RunPrefix() + "proxy/truncate";
  std::vector<uint8_t> body(64 * 1024, 3);
  REQUIRE(direct->Put(key, body).ok());
  {
    FaultProxy proxy(options->endpoint, "truncate");
    auto client = Client(Through(*options, proxy));
    auto get = client->Get(key, 1 << 20);
    REQUIRE_FALSE(get.ok());
    CHECK(get.error().kind == ObjectErrorKind::kTemporary);
    CHECK(get.error().code == "CURLE_PARTIAL_FILE");
    auto range = client->GetRange(key, 100, 1000);
    REQUIRE_FALSE(range.ok());
    CHECK(range.error().kind == ObjectErrorKind::kTemporary);
    auto head = client->Head(key);  // HEAD: the client sees an empty reply
    REQUIRE_FALSE(head.ok());
    CHECK(head.error().kind == ObjectErrorKind::kTemporary);

    REQUIRE(direct->Delete(key).ok());
    auto put = client->Put(key, body);  // forwarded and stored; the reply is cut short
    REQUIRE_FALSE(put.ok());
    CHECK(put.error().kind == ObjectErrorKind::kTemporary);
    CHECK(put.error().ambiguous);
  }
  CHECK(direct->Head(key).ok());  // which is why the Put had to be ambiguous
  CHECK(direct->Delete(key).ok());
}

}  // namespace
}  // namespace gpucache::cold
