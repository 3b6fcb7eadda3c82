// Helpers for the tests that run against the real S3 server (rgw.sh) and the fault proxy.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "cold/s3_client.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace gpucache::cold::testing {

// The server's options from the env file named by GPUCACHE_S3_ENV_FILE, or nullopt (with a
// MESSAGE saying why the case is skipped) when that variable is unset.
inline std::optional<S3Options> ServerOptions() {
  const char* path = std::getenv("GPUCACHE_S3_ENV_FILE");
  if (path == nullptr || *path == '\0') {
    MESSAGE("skipped: GPUCACHE_S3_ENV_FILE is not set (rgw.sh start DIR writes DIR/env)");
    return std::nullopt;
  }
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read GPUCACHE_S3_ENV_FILE ", path);
  std::map<std::string, std::string> env;
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  S3Options o;
  o.endpoint = env["GPUCACHE_S3_ENDPOINT"];
  o.bucket = env["GPUCACHE_S3_BUCKET"];
  o.region = env["GPUCACHE_S3_REGION"];
  o.access_key = env["GPUCACHE_S3_ACCESS_KEY"];
  o.secret_key = env["GPUCACHE_S3_SECRET_KEY"];
  REQUIRE_MESSAGE(Validate(o) == "", Validate(o));
  return o;
}

inline std::unique_ptr<S3Client> Client(const S3Options& options) {
  auto client = S3Client::Create(options);
  REQUIRE(client.ok());
  return std::move(client.value());
}

// A key prefix unique to this process, so runs can share a server.
inline const std::string& RunPrefix() {
  static const std::string prefix = [] {
    std::random_device rd;
    return "s3-client-test/" + std::to_string(::getpid()) + "-" + std::to_string(rd()) + "/";
  }();
  return prefix;
}

// tests/cold/harness/fault_proxy.py in front of `upstream`, injecting `faults` into every
// request (rate 1) or none (empty `faults`). Started by the constructor, SIGTERMed and reaped
// by the destructor (only the child this object spawned).
class FaultProxy {
 public:
  FaultProxy(const std::string& upstream, const std::string& faults, double stall_seconds = 30) {
    std::string port_file = dir_.path() + "/port", log = dir_.path() + "/log";
    std::string script = std::string(GPUCACHE_SOURCE_DIR) + "/tests/cold/harness/fault_proxy.py";
    std::vector<std::string> args = {"/usr/bin/python3",
                                     script,
                                     "--listen-port-file",
                                     port_file,
                                     "--upstream",
                                     upstream,
                                     "--fault-rate",
                                     faults.empty() ? "0" : "1",
                                     "--seed",
                                     "1",
                                     "--log",
                                     log,
                                     "--stall-seconds",
                                     std::to_string(stall_seconds)};
    if (!faults.empty()) {
      args.push_back("--faults");
      args.push_back(faults);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(port_file);
      std::string port;
      if (in >> port && !port.empty()) {
        endpoint_ = "http://127.0.0.1:" + port;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL("fault_proxy.py did not write its port");
  }
  ~FaultProxy() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  std::string log() const {
    std::ifstream in(dir_.path() + "/log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  test::TempDir dir_;
  pid_t pid_ = -1;
  std::string endpoint_;
};

}  // namespace gpucache::cold::testing
