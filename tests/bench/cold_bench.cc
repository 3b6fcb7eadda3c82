// gpucache-cold-bench: the cold tier's pack and refill against plain libcurl moving the same
// bytes to the same radosgw in the same run (docs/performance.md, "Cold tier").
//
//   sudo build/gpucache-cold-bench [--blocks 32] [--block-mib 2] [--pack-mib 8] [--runs 5]
//                                  [--poll wait|sleep]
//
// Needs root (it mounts gpucachefs) and the test harness's radosgw: GPUCACHE_S3_ENV_FILE as
// the cold tests get it, or else it runs tests/cold/harness/rgw.sh start/stop itself in
// --rgw-dir. Everything stays on 127.0.0.1. Prints one line per case:
//   case=cold_pack|cold_refill_1|cold_refill_4|cold_refill_1_unknown gpucache=X direct=Y ratio=R unit=MiB/s
// cold_pack:     `cold.pack` (async, polled) of N committed blocks (listing, reading, packing, uploading the
//                objects, manifests and locators) / libcurl PUTs of the very same objects
//                (same keys under another prefix, same sizes and bytes), 4 handles in
//                parallel as the sink's `concurrency = 4`.
// cold_refill_1: N refills one after another (async request + poll, as gpucachectl does),
//                each committed to the hot tier / one reused libcurl handle making the
//                refill's two GETs: the block's locator, then the byte range it names. The
//                daemon packed the blocks itself, so it knows their places (one range GET);
//                the direct side models a node that must find the block.
// cold_refill_4: the same with 4 callers / 4 handles in parallel.
// cold_refill_1_unknown: cold_refill_1 on a second daemon (same prefix) with known_places = 0:
//                every refill reads its locator first, as on a node that did not pack them.
// MiB/s counts block payload bytes in every column. Each case runs --runs times, the two
// sides alternating which goes first (the machine is shared and noisy); the line gives the
// medians, their ratio, and every run of each side (`gpucache_runs`, `direct_runs`).
#include <filesystem>
#include <curl/curl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "clients/cpp/mount_client.h"
#include "cold/digest.h"
#include "cold/locator.h"
#include "cold/manifest.h"
#include "cold/s3_client.h"
#include "cold/s3_request.h"
#include "store/layout.h"
#include "tests/mount/mount_helpers.h"
#include "tests/support/sample_identity.h"

namespace gpucache::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

std::map<std::string, std::string> ReadEnv(const std::string& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

CacheIdentity Block(int i) {
  CacheIdentity id = test::SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(i % 251), 16 + i / 251);
  return id;
}

Bytes Payload(int i, size_t size) {
  Bytes b(size);
  uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1);
  for (size_t k = 0; k < size; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b[k] = static_cast<uint8_t>(x);
  }
  return b;
}

json Ctl(const test::MountedFs& m, const json& req) {
  return json::parse(test::Control(m, req.dump()), nullptr, false);
}

// How the bench learns that an async op is done: "wait" as gpucachectl does now (cold.op with
// wait_ms, answered when the op is done), or "sleep" as it did before (polls at 100 us
// doubling to 2 ms), to compare the two against the same daemon.
bool g_poll_sleep = false;

json Async(const test::MountedFs& m, json req) {
  req["async"] = true;
  json r = Ctl(m, req);
  for (int us = 100; r.value("ok", false) && r.contains("op_id") && r.value("state", "") != "done";
       us = std::min(us * 2, 2000)) {
    json poll{{"op", "cold.op"}, {"op_id", r["op_id"]}};
    if (g_poll_sleep) std::this_thread::sleep_for(std::chrono::microseconds(us));
    else poll["wait_ms"] = 1000;
    r = Ctl(m, poll);
  }
  return r;
}

json Refill(const test::MountedFs& m, const CacheIdentity& id) {
  return Async(m, {{"op", "cold.refill"}, {"identity", HexEncode(EncodePhysicalKey(id))}});
}

// Plain libcurl: one easy handle per thread, reused (keep-alive), SigV4 by curl itself.
class Direct {
 public:
  explicit Direct(const cold::S3Options& o) : o_(o), sigv4_("aws:amz:" + o.region + ":s3") {
    h_ = curl_easy_init();
  }
  ~Direct() { curl_easy_cleanup(h_); }
  bool Put(const std::string& key, const std::vector<uint8_t>& body) {
    std::string hash = "x-amz-content-sha256: " + cold::Sha256Hex(body);
    Cursor c{&body, 0};
    Common(key, hash);
    curl_easy_setopt(h_, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h_, CURLOPT_READFUNCTION, +[](char* p, size_t s, size_t n, void* u) -> size_t {
      auto* c = static_cast<Cursor*>(u);
      size_t k = std::min(s * n, c->body->size() - c->at);
      std::memcpy(p, c->body->data() + c->at, k);
      c->at += k;
      return k;
    });
    curl_easy_setopt(h_, CURLOPT_READDATA, &c);
    curl_easy_setopt(h_, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(h_, CURLOPT_EXPECT_100_TIMEOUT_MS, 1L);
    return Perform() == 200;
  }
  bool GetRange(const std::string& key, uint64_t off, uint64_t len, std::vector<uint8_t>& out) {
    Common(key, "x-amz-content-sha256: " + std::string(cold::kEmptySha256));
    std::string range = std::to_string(off) + "-" + std::to_string(off + len - 1);
    curl_easy_setopt(h_, CURLOPT_RANGE, range.c_str());
    out.reserve(len);
    return Collect(out) == 206 && out.size() == len;
  }
  bool Get(const std::string& key, std::vector<uint8_t>& out) {
    Common(key, "x-amz-content-sha256: " + std::string(cold::kEmptySha256));
    return Collect(out) == 200;
  }

 private:
  struct Cursor {
    const std::vector<uint8_t>* body;
    size_t at;
  };
  void Common(const std::string& key, const std::string& hash_header) {
    curl_easy_reset(h_);  // keeps the connection cache: the connection is reused
    url_ = cold::ObjectUrl(o_.endpoint, o_.bucket, key);
    curl_slist_free_all(headers_);
    headers_ = curl_slist_append(nullptr, hash_header.c_str());
    curl_easy_setopt(h_, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(h_, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h_, CURLOPT_AWS_SIGV4, sigv4_.c_str());
    curl_easy_setopt(h_, CURLOPT_USERNAME, o_.access_key.c_str());
    curl_easy_setopt(h_, CURLOPT_PASSWORD, o_.secret_key.c_str());
    curl_easy_setopt(h_, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(h_, CURLOPT_WRITEFUNCTION, +[](char*, size_t s, size_t n, void*) { return s * n; });
  }
  long Collect(std::vector<uint8_t>& out) {
    out.clear();
    curl_easy_setopt(h_, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(h_, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* u) -> size_t {
      auto* v = static_cast<std::vector<uint8_t>*>(u);
      auto* b = reinterpret_cast<const uint8_t*>(p);  // bytes, so insert is one memmove
      v->insert(v->end(), b, b + s * n);
      return s * n;
    });
    return Perform();
  }
  long Perform() {
    long status = 0;
    if (curl_easy_perform(h_) != CURLE_OK) return -1;
    curl_easy_getinfo(h_, CURLINFO_RESPONSE_CODE, &status);
    return status;
  }
  cold::S3Options o_;
  std::string sigv4_, url_;
  CURL* h_ = nullptr;
  curl_slist* headers_ = nullptr;
};

// Runs fn(i) for i in [0, n) on `threads` threads, each with its own Direct; seconds taken.
template <typename Fn>
double Parallel(int threads, int n, const cold::S3Options& o, Fn fn) {
  std::atomic<int> next{0};
  std::atomic<bool> ok{true};
  std::vector<std::unique_ptr<Direct>> handles;
  for (int t = 0; t < threads; t++) handles.push_back(std::make_unique<Direct>(o));
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) {
    ts.emplace_back([&, t] {
      for (int i; (i = next++) < n;) ok = ok && fn(*handles[t], i);
    });
  }
  for (auto& t : ts) t.join();
  double s = Seconds(t0);
  if (!ok) throw std::runtime_error("a direct request failed");
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string Joined(const std::vector<double>& v) {
  std::string s;
  char buf[32];
  for (double x : v) std::snprintf(buf, sizeof buf, "%s%.1f", s.empty() ? "" : ",", x), s += buf;
  return s;
}

// MiB/s of each run of each side -> one line: the medians, their ratio, and every run.
void Print(const char* name, const std::vector<double>& gpucache, const std::vector<double>& direct) {
  double g = Median(gpucache), d = Median(direct);
  std::printf("case=%s gpucache=%.1f direct=%.1f ratio=%.2f unit=MiB/s gpucache_runs=%s direct_runs=%s\n",
              name, g, d, g / d, Joined(gpucache).c_str(), Joined(direct).c_str());
  std::fflush(stdout);
}

int Run(int blocks, size_t block_bytes, uint64_t pack_bytes, int runs, const cold::S3Options& o) {
  std::string prefix = "cold-bench/" + std::to_string(::getpid()) + "/";
  std::string creds_dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                          "/gpucache-cold-bench-" + std::to_string(::getpid());
  std::filesystem::create_directories(creds_dir);
  std::string creds = creds_dir + "/s3.credentials";
  std::ofstream(creds) << "access_key=" << o.access_key << "\nsecret_key=" << o.secret_key << "\n";
  std::string keyring = creds_dir + "/keyring";  // the seal keyring the cold tier requires
  std::ofstream(keyring) << "current = k1\nkey.k1 = " << std::string(64, '1') << "\n";
  ::chmod(keyring.c_str(), 0600);
  std::string cold = "\n[cold]\nenabled = true\nendpoint = \"" + o.endpoint + "\"\nbucket = \"" +
                     o.bucket + "\"\nregion = \"" + o.region + "\"\ncredentials_file = \"" + creds +
                     "\"\nprefix = \"" + prefix + "\"\nwrite_back = \"manual\"\npack_target_bytes = " +
                     std::to_string(pack_bytes) + "\nconcurrency = 4\nrefill_workers = 4\n" +
                     "keyring_file = \"" + keyring + "\"\n";
  test::MountedFs m(test::TestConfig() + cold);
  MountClient client(m.mnt());
  for (int i = 0; i < blocks; i++) {
    if (client.Commit(Block(i), Payload(i, block_bytes)) != 0) throw std::runtime_error("commit failed");
  }
  const double mib = static_cast<double>(blocks) * block_bytes / (1 << 20);

  // cold_pack: each run after the first deletes the locators, so every block is packed again.
  auto s3 = cold::S3Client::Create(o);
  auto pack_all = [&] {
    auto t0 = Clock::now();
    json packed = Async(m, {{"op", "cold.pack"}});
    double s = Seconds(t0);
    if (packed.value("complete", false) != true || packed.value("blocks", 0) != blocks) {
      throw std::runtime_error("pack: " + packed.dump());
    }
    return s;
  };
  auto forget_locators = [&] {
    auto locators = s3.value()->List(prefix + "locators/");
    if (!locators.ok()) throw std::runtime_error("list: " + locators.error().message);
    for (const cold::ObjectMeta& meta : locators.value()) {
      if (!s3.value()->Delete(meta.key).ok()) throw std::runtime_error("delete " + meta.key);
    }
  };
  std::vector<double> pack_g, pack_d;
  pack_g.push_back(mib / pack_all());
  auto listed = s3.value()->List(prefix);
  if (!listed.ok()) throw std::runtime_error("list: " + listed.error().message);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> objects;
  for (const cold::ObjectMeta& meta : listed.value()) {
    auto got = s3.value()->Get(meta.key, 1ull << 32);
    if (!got.ok()) throw std::runtime_error("get: " + got.error().message);
    objects.emplace_back("cold-bench-direct/" + std::to_string(::getpid()) + "/" + meta.key,
                         std::move(got.value()));
  }
  auto direct_pack = [&] {
    return mib / Parallel(4, static_cast<int>(objects.size()), o, [&](Direct& d, int i) {
      return d.Put(objects[i].first, objects[i].second);
    });
  };
  pack_d.push_back(direct_pack());
  for (int r = 1; r < runs; r++) {
    if (r % 2) pack_d.push_back(direct_pack());
    forget_locators();
    pack_g.push_back(mib / pack_all());
    if (r % 2 == 0) pack_d.push_back(direct_pack());
  }
  Print("cold_pack", pack_g, pack_d);

  auto evict_all = [&](const test::MountedFs& node) {
    for (int i = 0; i < blocks; i++) {
      json r = Ctl(node, {{"op", "evict"}, {"path", AddressOf(Block(i)).RelativePath()}});
      if (r["ok"] != true) throw std::runtime_error("evict: " + r.dump());
    }
  };
  auto refill_all = [&](const test::MountedFs& node, int callers) {
    std::atomic<int> next{0};
    std::atomic<int> hits{0};
    auto t = Clock::now();
    std::vector<std::thread> ts;
    for (int c = 0; c < callers; c++) {
      ts.emplace_back([&] {
        for (int i; (i = next++) < blocks;) hits += Refill(node, Block(i)).value("result", "") == "hit";
      });
    }
    for (auto& th : ts) th.join();
    double s = Seconds(t);
    if (hits != blocks) throw std::runtime_error("refill: " + std::to_string(hits) + " hits");
    return s;
  };
  // The refill's request pattern: the locator, then the byte range it names (no seal check).
  auto direct_get = [&](Direct& d, int i) {
    std::vector<uint8_t> loc, out;
    if (!d.Get(cold::LocatorKey(prefix, AddressOf(Block(i))), loc)) return false;
    std::optional<cold::Locator> l = cold::DecodeLocator(loc);
    if (!l || l->version != cold::kLocatorVersion) return false;
    return d.GetRange(cold::PackKey(prefix, l->object_digest), l->offset, l->length, out);
  };
  for (int callers : {1, 4}) {
    std::vector<double> g, d;
    for (int r = 0; r < runs; r++) {
      if (r % 2) d.push_back(mib / Parallel(callers, blocks, o, direct_get));
      evict_all(m);
      g.push_back(mib / refill_all(m, callers));
      if (r % 2 == 0) d.push_back(mib / Parallel(callers, blocks, o, direct_get));
    }
    Print(callers == 1 ? "cold_refill_1" : "cold_refill_4", g, d);
  }
  // cold_refill_1_unknown: a second daemon on the same prefix that keeps no known places, so
  // each refill reads the block's locator first, as on a node that did not write the block
  // back (or restarted): the cross-node cost, against the same direct side.
  {
    test::MountedFs other(test::TestConfig() + cold + "known_places = 0\n");
    std::vector<double> g, d;
    for (int r = 0; r < runs; r++) {
      if (r % 2) d.push_back(mib / Parallel(1, blocks, o, direct_get));
      g.push_back(mib / refill_all(other, 1));
      evict_all(other);
      if (r % 2 == 0) d.push_back(mib / Parallel(1, blocks, o, direct_get));
    }
    Print("cold_refill_1_unknown", g, d);
  }
  std::filesystem::remove_all(creds_dir);
  return 0;
}

}  // namespace
}  // namespace gpucache::bench

int main(int argc, char** argv) {
  CLI::App app{"gpucache-cold-bench: cold pack and refill against plain libcurl on one radosgw"};
  int blocks = 32, runs = 5;
  double block_mib = 2, pack_mib = 8;
  std::string rgw_dir = "/tmp/gpucache-cold-bench-rgw";
  app.add_option("--blocks", blocks, "blocks packed and refilled")->check(CLI::Range(1, 4096));
  app.add_option("--block-mib", block_mib, "MiB per block")->check(CLI::Range(0.001, 256.0));
  app.add_option("--pack-mib", pack_mib, "pack_target_bytes in MiB")->check(CLI::Range(0.001, 1024.0));
  app.add_option("--runs", runs, "runs of each case and side (medians are printed)")->check(CLI::Range(1, 100));
  std::string poll = "wait";
  app.add_option("--poll", poll, "wait: cold.op waits for the op (gpucachectl); sleep: the older polls")
      ->check(CLI::IsMember({"wait", "sleep"}));
  app.add_option("--rgw-dir", rgw_dir, "where to start the harness's radosgw without GPUCACHE_S3_ENV_FILE");
  CLI11_PARSE(app, argc, argv);
  gpucache::bench::g_poll_sleep = poll == "sleep";
  if (::geteuid() != 0) {
    std::cerr << "gpucache-cold-bench: run as root (it mounts gpucachefs)\n";
    return 2;
  }
  std::string rgw = std::string(GPUCACHE_SOURCE_DIR) + "/tests/cold/harness/rgw.sh";
  const char* env_file = std::getenv("GPUCACHE_S3_ENV_FILE");
  bool started = false;
  std::string env_path = env_file ? env_file : rgw_dir + "/env";
  if (!env_file) {
    if (std::system((rgw + " start " + rgw_dir + " >&2").c_str()) != 0) return 2;
    started = true;
  }
  auto env = gpucache::bench::ReadEnv(env_path);
  gpucache::cold::S3Options o;
  o.endpoint = env["GPUCACHE_S3_ENDPOINT"];
  o.bucket = env["GPUCACHE_S3_BUCKET"];
  o.region = env["GPUCACHE_S3_REGION"];
  o.access_key = env["GPUCACHE_S3_ACCESS_KEY"];
  o.secret_key = env["GPUCACHE_S3_SECRET_KEY"];
  int rc = 2;
  try {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rc = gpucache::bench::Run(blocks, static_cast<size_t>(block_mib * (1 << 20)),
                              static_cast<uint64_t>(pack_mib * (1 << 20)), runs, o);
  } catch (const std::exception& e) {
    std::cerr << "gpucache-cold-bench: " << e.what() << "\n";
  }
  if (started) (void)!std::system((rgw + " stop " + rgw_dir + " >&2").c_str());
  return rc;
}
