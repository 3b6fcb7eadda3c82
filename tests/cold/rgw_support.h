// Support for the cold-tier tests against the real gateway (tests/cold/harness): the env file
// rgw.sh wrote, the fault proxy as a child process, and boto3 through s3_check.py.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cold/rgw_env.h"
#include "tests/support/temp_dir.h"

namespace gpucache::cold::testing {

inline const std::string kHarness = std::string(GPUCACHE_SOURCE_DIR) + "/tests/cold/harness";

// GPUCACHE_S3_* from the env file named by GPUCACHE_S3_ENV_FILE (set by the ctest fixture).
inline std::map<std::string, std::string> RgwEnv() {
  std::map<std::string, std::string> env;
  const char* path = std::getenv("GPUCACHE_S3_ENV_FILE");
  if (!path) return env;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// Runs a shell command; returns its stdout (and its exit status through *status).
inline std::string Run(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 255;
  return out;
}

// boto3 (Debian's python3-boto3) reading the bucket: proves what we wrote is ordinary S3.
inline std::string Boto3(const std::string& args, int* status = nullptr) {
  return Run("/usr/bin/python3 " + kHarness + "/s3_check.py --env " +
                 std::getenv("GPUCACHE_S3_ENV_FILE") + " " + args,
             status);
}

// fault_proxy.py between the client and the gateway at a fault rate, logging every request
// (rgw_env.h's FaultProxy injects into every request or none, for the client's own tests).
class LoggedProxy {
 public:
  // `outage_file`: while that file exists the proxy resets every request (fault "outage").
  LoggedProxy(const std::string& upstream, double rate, const std::string& faults = "",
             int stall_seconds = 2, int seed = 1, const std::string& outage_file = "",
             const std::string& fault_methods = "") {
    std::string port_file = dir_.path() + "/port";
    log_ = dir_.path() + "/log.jsonl";
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<std::string> args = {"/usr/bin/python3", kHarness + "/fault_proxy.py",
                                       "--listen-port-file", port_file, "--upstream", upstream,
                                       "--fault-rate", std::to_string(rate), "--seed",
                                       std::to_string(seed), "--log", log_, "--stall-seconds",
                                       std::to_string(stall_seconds)};
      if (!faults.empty()) args.insert(args.end(), {"--faults", faults});
      if (!outage_file.empty()) args.insert(args.end(), {"--outage-file", outage_file});
      if (!fault_methods.empty()) args.insert(args.end(), {"--fault-methods", fault_methods});
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 200 && port_.empty(); i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream in(port_file);
      std::getline(in, port_);
    }
  }
  ~LoggedProxy() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::string endpoint() const { return "http://127.0.0.1:" + port_; }
  bool ready() const { return !port_.empty(); }
  // The number of requests logged once the log has stopped growing. A request is logged before
  // its answer is sent, but a stall is logged when it ends, and a client that gave up on it
  // can be done before its line appears.
  size_t Settled() const {
    size_t n = Requests().size();
    for (int i = 0; i < 50; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      size_t now = Requests().size();
      if (now == n) return n;
      n = now;
    }
    return n;
  }
  // Every request logged so far, in arrival order (a stall is logged when it ends, so the
  // file's order is not the order requests came in; "seq" is).
  std::vector<nlohmann::json> Requests() const {
    std::vector<nlohmann::json> out;
    std::ifstream in(log_);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded()) out.push_back(j);
    }
    std::sort(out.begin(), out.end(),
              [](const nlohmann::json& a, const nlohmann::json& b) { return a["seq"] < b["seq"]; });
    return out;
  }

 private:
  test::TempDir dir_;
  std::string log_, port_;
  pid_t pid_ = -1;
};

// The seal keyring the test daemons share (docs/cold-tier.md, "Seals and the keyring"): key
// "k1" is current; `extra_keys` adds lines (e.g. "key.k2 = <hex>\n").
inline std::string TestKeyringText(const std::string& current = "k1", const std::string& extra_keys = "") {
  return "current = " + current + "\nkey.k1 = " + std::string(64, '1') + "\n" + extra_keys;
}

inline void WriteKeyring(const std::string& path, const std::string& text = TestKeyringText()) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0600);
}

// A [cold] table for a test daemon; credentials go through a credentials file, and the seal
// keyring is the file "keyring" beside it (WriteCredentials writes one) unless `extra` names one.
inline std::string ColdSection(const std::string& endpoint, const std::string& creds_file,
                               const std::string& prefix, const std::string& extra = "") {
  auto env = RgwEnv();
  std::string keyring = extra.find("keyring_file") != std::string::npos
                            ? ""
                            : "keyring_file = \"" + creds_file.substr(0, creds_file.rfind('/')) +
                                  "/keyring\"\n";
  return "\n[cold]\nenabled = true\nendpoint = \"" + endpoint + "\"\nbucket = \"" +
         env["GPUCACHE_S3_BUCKET"] + "\"\nregion = \"" + env["GPUCACHE_S3_REGION"] +
         "\"\ncredentials_file = \"" + creds_file + "\"\nprefix = \"" + prefix +
         "\"\nconnect_timeout = 1.0\ntransfer_timeout = 5.0\n" +
         (extra.find("write_back") == std::string::npos ? "write_back = \"manual\"\n" : "") +
         // Tests keep backoffs short and, unless they ask for it, no background re-drive (it
         // would empty the failed queue that a test inspects).
         (extra.find("max_attempts") == std::string::npos ? "max_attempts = 3\n" : "") +
         (extra.find("retry_base_delay") == std::string::npos
              ? "retry_base_delay = 0.01\nretry_max_delay = 0.05\n" : "") +
         (extra.find("redrive_interval") == std::string::npos ? "redrive_interval = 0\n" : "") +
         keyring + extra;
}

// The credentials file, and the default test keyring beside it.
inline void WriteCredentials(const std::string& path) {
  auto env = RgwEnv();
  std::ofstream(path) << "access_key=" << env["GPUCACHE_S3_ACCESS_KEY"]
                      << "\nsecret_key=" << env["GPUCACHE_S3_SECRET_KEY"] << "\n";
  WriteKeyring(path.substr(0, path.rfind('/')) + "/keyring");
}

// A key prefix unique to this process and call, so reruns against one bucket never collide.
inline std::string UniquePrefix(const char* name) {
  static int n = 0;
  return std::string("t") + std::to_string(::getpid()) + "-" + std::to_string(n++) + "-" + name + "/";
}

}  // namespace gpucache::cold::testing
