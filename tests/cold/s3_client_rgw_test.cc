// S3Client against a real S3 server (Ceph RADOS Gateway from tests/cold/harness/rgw.sh) and,
// for failure classification, through tests/cold/harness/fault_proxy.py in front of it.
// The server comes from the env file named by GPUCACHE_S3_ENV_FILE (rgw.sh writes DIR/env);
// without that variable every case is skipped with a MESSAGE. Keys live under a prefix unique
// to the run, so runs can share a server; each case deletes what it wrote.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "cold/s3_client.h"
#include "tests/cold/rgw_env.h"

namespace gpucache::cold {
namespace {

using testing::Client;
using testing::RunPrefix;
using testing::ServerOptions;

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Deletes every key under `prefix` (cleanup; failures are reported, not fatal).
void DeleteAll(S3Client& client, const std::string& prefix) {
  auto list = client.List(prefix);
  if (!list.ok()) return;
  for (const ObjectMeta& m : list.value()) CHECK(client.Delete(m.key).ok());
}

TEST_CASE("S3Client rgw: put, head, get, range, list, delete of 1 MiB") {
  auto options = ServerOptions();
  if (!options) return;
  auto client = Client(*options);
  const std::string key = RunPrefix() + "basic/object";
  std::vector<uint8_t> body = RandomBytes(1 << 20, 1);

  std::vector<double> put_ms, get_ms;
  for (int i = 0; i < 10; ++i) {
    auto t0 = Clock::now();
    REQUIRE(client->Put(key, body).ok());
    auto t1 = Clock::now();
    auto got = client->Get(key, 2 << 20);
    auto t2 = Clock::now();
    REQUIRE(got.ok());
    CHECK(got.value() == body);
    put_ms.push_back(Ms(t1 - t0));
    get_ms.push_back(Ms(t2 - t1));
  }
  std::sort(put_ms.begin(), put_ms.end());
  std::sort(get_ms.begin(), get_ms.end());
  MESSAGE("1 MiB against rgw, median of 10: put ", put_ms[5], " ms (min ", put_ms[0], "), get ",
          get_ms[5], " ms (min ", get_ms[0], ")");

  auto head = client->Head(key);
  REQUIRE(head.ok());
  CHECK(head.value().size == body.size());
  CHECK(head.value().etag.size() == 32);  // single-part ETag: MD5 hex, unquoted

  auto range = client->GetRange(key, 1000, 4096);
  REQUIRE(range.ok());
  CHECK(std::equal(range.value().begin(), range.value().end(), body.begin() + 1000));
  auto tail = client->GetRange(key, body.size() - 1, 1);
  REQUIRE(tail.ok());
  CHECK(tail.value()[0] == body.back());
  auto past_end = client->GetRange(key, body.size() - 10, 20);  // server returns 10 bytes
  REQUIRE_FALSE(past_end.ok());
  CHECK(past_end.error().kind == ObjectErrorKind::kPermanent);
  auto beyond = client->GetRange(key, body.size() + 10, 20);  // 416 InvalidRange
  REQUIRE_FALSE(beyond.ok());
  CHECK(beyond.error().kind == ObjectErrorKind::kPermanent);
  CHECK(beyond.error().http_status == 416);

  auto too_big = client->Get(key, body.size() - 1);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().code == "TooLarge");

  auto list = client->List(RunPrefix() + "basic/");
  REQUIRE(list.ok());
  REQUIRE(list.value().size() == 1);
  CHECK(list.value()[0].key == key);
  CHECK(list.value()[0].size == body.size());
  CHECK(list.value()[0].etag == head.value().etag);

  REQUIRE(client->Delete(key).ok());
  auto gone = client->Head(key);
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().kind == ObjectErrorKind::kNotFound);
  auto gone_get = client->Get(key, 100);
  REQUIRE_FALSE(gone_get.ok());
  CHECK(gone_get.error().kind == ObjectErrorKind::kNotFound);
  CHECK(gone_get.error().code == "NoSuchKey");
  CHECK(client->Delete(key).ok());  // absent: still success
}

TEST_CASE("S3Client rgw: keys that need encoding round-trip through put, list and get") {
  auto options = ServerOptions();
  if (!options) return;
  auto client = Client(*options);
  const std::string dir = RunPrefix() + "keys/";
  const std::vector<std::string> names = {"plain",
                                          "with space",
                                          "plus+sign",
                                          "amp&er=sand?q#frag",
                                          "caf\xC3\xA9 \xE4\xB8\xAD",
                                          "a/b/c",
                                          "dots/..x/.y.",
                                          "dbl//slash",
                                          "tilde~_-.",
                                          "pct%20lit",
                                          "<tag>\"'",
                                          "semi;colon,comma!$()*@:[]"};
  for (const auto& n : names) {
    CAPTURE(n);
    REQUIRE(client->Put(dir + n, Bytes(n)).ok());
  }
  auto list = client->List(dir);
  REQUIRE(list.ok());
  std::vector<std::string> listed;
  for (const auto& m : list.value()) listed.push_back(m.key.substr(dir.size()));
  std::vector<std::string> want = names;
  std::sort(want.begin(), want.end());
  std::sort(listed.begin(), listed.end());
  CHECK(listed == want);
  for (const auto& n : names) {
    CAPTURE(n);
    auto got = client->Get(dir + n, 1000);
    REQUIRE(got.ok());
    CHECK(std::string(got.value().begin(), got.value().end()) == n);
  }
  auto prefixed = client->List(dir + "with ");  // a prefix with a space
  REQUIRE(prefixed.ok());
  CHECK(prefixed.value().size() == 1);
  DeleteAll(*client, dir);
}

TEST_CASE("S3Client rgw: List follows continuation tokens past 1,000 keys") {
  auto options = ServerOptions();
  if (!options) return;
  auto client = Client(*options);
  const std::string dir = RunPrefix() + "many/";
  constexpr int kKeys = 1005, kThreads = 8;
  std::atomic<int> next{0}, failed{0};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next++) < kKeys;) {
        if (!client->Put(dir + std::to_string(10000 + i), Bytes("x")).ok()) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failed == 0);
  MESSAGE(kKeys, " tiny puts from ", kThreads, " threads: ", Ms(Clock::now() - t0), " ms");

  auto all = client->List(dir);  // pages of 1000 (the server's default)
  REQUIRE(all.ok());
  CHECK(all.value().size() == kKeys);
  S3Options small_pages = *options;
  small_pages.list_page_size = 97;
  auto paged = Client(small_pages)->List(dir);
  REQUIRE(paged.ok());
  REQUIRE(paged.value().size() == kKeys);
  for (int i = 0; i < kKeys; ++i) CHECK(paged.value()[i].key == dir + std::to_string(10000 + i));

  next = 0;
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i; (i = next++) < kKeys;) {
        if (!client->Delete(dir + std::to_string(10000 + i)).ok()) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failed == 0);
  auto empty = client->List(dir);
  REQUIRE(empty.ok());
  CHECK(empty.value().empty());
}

TEST_CASE("S3Client rgw: a wrong secret is kPermanent 403, and UpdateCredentials repairs it") {
  auto options = ServerOptions();
  if (!options) return;
  S3Options bad = *options;
  bad.secret_key = "WrongSecretThatMustNeverAppear0123456789";
  auto client = Client(bad);
  const std::string key = RunPrefix() + "creds/object";
  auto put = client->Put(key, Bytes("data"));
  REQUIRE_FALSE(put.ok());
  CHECK(put.error().kind == ObjectErrorKind::kPermanent);
  CHECK(put.error().http_status == 403);
  CHECK(put.error().code == "SignatureDoesNotMatch");
  CHECK_FALSE(put.error().ambiguous);
  CHECK(put.error().message.find(bad.secret_key) == std::string::npos);
  CHECK(put.error().message.find(options->secret_key) == std::string::npos);
  MESSAGE("403 message: ", put.error().message);
  auto head = client->Head(key);  // no body: status only
  REQUIRE_FALSE(head.ok());
  CHECK(head.error().kind == ObjectErrorKind::kPermanent);

  S3Options unknown_key = *options;
  unknown_key.access_key = "NOSUCHACCESSKEY00000";
  auto put2 = Client(unknown_key)->Put(key, Bytes("data"));
  REQUIRE_FALSE(put2.ok());
  CHECK(put2.error().kind == ObjectErrorKind::kPermanent);
  CHECK(put2.error().http_status == 403);

  REQUIRE(client->UpdateCredentials(options->access_key, options->secret_key));
  auto repaired = client->Put(key, Bytes("data"));
  REQUIRE_MESSAGE(repaired.ok(), repaired.error().message);
  CHECK(client->Head(key).ok());
  CHECK(client->Delete(key).ok());
}

TEST_CASE("S3Client rgw: an unreachable endpoint is kTemporary, quickly") {
  auto options = ServerOptions();
  if (!options) return;
  // A port that was free a moment ago: bind, read the port, close.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  S3Options closed = *options;
  closed.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto client = Client(closed);
  auto t0 = Clock::now();
  auto put = client->Put(RunPrefix() + "unreachable", Bytes("x"));
  double ms = Ms(Clock::now() - t0);
  REQUIRE_FALSE(put.ok());
  CHECK(put.error().kind == ObjectErrorKind::kTemporary);
  CHECK_FALSE(put.error().ambiguous);
  MESSAGE("refused connection reported in ", ms, " ms (connect timeout ", closed.connect_timeout_ms,
          " ms)");
}

}  // namespace
}  // namespace gpucache::cold
