// Every path an operator configures (the configuration file, data directories, the cold tier's
// keyring and credentials) as a FIFO, /dev/zero, a symlink and a directory: `--check-config`
// answers at once with a message that names the path, never hangs or grows, and a SIGHUP
// reload of such a file fails, is counted, and leaves the next SIGHUP working (adr/0017).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

namespace fs = std::filesystem;
using namespace test;

struct Outcome {
  int rc = -1;  // 124: still running after 10 s (killed by timeout)
  std::string output;
};

Outcome CheckConfig(const std::string& config, const std::string& mountpoint = "") {
  std::string cmd = "timeout -s KILL 10 " GPUCACHEFS_BIN " --check-config '" + config + "' " +
                    (mountpoint.empty() ? "" : "'" + mountpoint + "' ") + "2>&1";
  Outcome o;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) o.output.append(buf, n);
  int status = ::pclose(p);
  o.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

void Write(const std::string& path, const std::string& text, mode_t mode = 0600) {
  fs::remove_all(path);  // it may be one of the FIFOs below: opening it would wait for a reader
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

// Each of the four things that are not a small regular file, made at `path`.
void MakeBad(const std::string& kind, const std::string& path) {
  fs::remove_all(path);
  if (kind == "fifo") REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  if (kind == "/dev/zero") fs::create_symlink("/dev/zero", path);
  if (kind == "directory") fs::create_directory(path);
  if (kind == "link to a fifo") {
    REQUIRE(::mkfifo((path + ".fifo").c_str(), 0600) == 0);
    fs::create_symlink(path + ".fifo", path);
  }
}

const char* const kKinds[] = {"fifo", "/dev/zero", "directory", "link to a fifo"};

std::string ColdConfig(const std::string& dir) {
  return "data_dir = \"" + dir + "/data\"\n[tenants.acme]\nuids = [0]\n[cold]\nenabled = true\n"
         "endpoint = \"http://127.0.0.1:9\"\nbucket = \"gpucache-test\"\ncredentials_file = \"" + dir +
         "/credentials\"\nkeyring_file = \"" + dir + "/keyring\"\n";
}

}  // namespace

TEST_CASE("Operator files: the configuration file as a FIFO, /dev/zero, a directory or a link is answered at once") {
  TempDir tmp;
  const std::string config = tmp.path() + "/gpucache.toml";
  for (const char* kind : kKinds) {
    CAPTURE(kind);
    MakeBad(kind, config);
    Outcome o = CheckConfig(config);
    CHECK(o.rc == 78);  // EX_CONFIG, not 124 (hung) or killed for memory
    CHECK(o.output.find(config) != std::string::npos);
  }
  // A link to a regular file is a configuration like any other (configuration management).
  Write(tmp.path() + "/real.toml", "data_dir = \"" + tmp.path() + "/data\"\n[tenants.acme]\nuids = [0]\n");
  fs::remove_all(config);
  fs::create_symlink(tmp.path() + "/real.toml", config);
  Outcome o = CheckConfig(config);
  CHECK_MESSAGE(o.rc == 0, o.output);
  // A missing file says so, not ":0: File could not be opened".
  o = CheckConfig(tmp.path() + "/missing.toml");
  CHECK(o.rc == 78);
  CHECK(o.output.find(tmp.path() + "/missing.toml: no such file") != std::string::npos);
}

TEST_CASE("Operator files: the keyring and the credentials file as a FIFO, /dev/zero, a directory or a link are refused at once") {
  TempDir tmp;
  const std::string keyring = tmp.path() + "/keyring", credentials = tmp.path() + "/credentials";
  Write(tmp.path() + "/gpucache.toml", ColdConfig(tmp.path()));
  for (const std::string target : {keyring, credentials}) {
    for (const char* kind : kKinds) {
      CAPTURE(target);
      CAPTURE(kind);
      Write(keyring, "current = k1\nkey.k1 = " + std::string(64, '1') + "\n");
      Write(credentials, "access_key=a\nsecret_key=s\n");
      fs::remove(keyring + ".fifo");
      fs::remove(credentials + ".fifo");
      MakeBad(kind, target);
      Outcome o = CheckConfig(tmp.path() + "/gpucache.toml");
      CHECK(o.rc == 78);
      CHECK(o.output.find(target) != std::string::npos);
    }
  }
}

TEST_CASE("Operator files: a data directory that is not gpucache's is refused by --check-config and by start") {
  TempDir tmp;
  const std::string config = tmp.path() + "/gpucache.toml";
  auto with_data_dir = [&](const std::string& dir) {
    Write(config, "data_dir = \"" + dir + "\"\n[tenants.acme]\nuids = [0]\n");
  };
  Write(tmp.path() + "/a-file", "x");
  fs::create_directories(tmp.path() + "/busy");
  Write(tmp.path() + "/busy/thesis.tex", "years of work");
  fs::create_directories(tmp.path() + "/mnt");
  struct Case {
    std::string dir, says;
  };
  for (const Case& c : {Case{"/", "system directory"}, Case{"/var", "system directory"},
                        Case{"/tmp", "system directory"}, Case{"/proc", "system directory"},
                        Case{tmp.path() + "/a-file", "not a directory"},
                        Case{tmp.path() + "/busy", "did not make"},
                        Case{tmp.path() + "/busy/", "did not make"}}) {
    CAPTURE(c.dir);
    with_data_dir(c.dir);
    Outcome o = CheckConfig(config);
    CHECK(o.rc == 78);
    CHECK_MESSAGE(o.output.find(c.says) != std::string::npos, o.output);
  }
  // The mountpoint and the data directory inside one another.
  with_data_dir(tmp.path() + "/mnt/data");
  Outcome o = CheckConfig(config, tmp.path() + "/mnt");
  CHECK(o.rc == 78);
  CHECK(o.output.find("inside the mountpoint") != std::string::npos);
  // Aliases of one directory.
  Write(config, "data_dirs = [\"" + tmp.path() + "/d1\", \"" + tmp.path() + "/d1/\"]\n[tenants.acme]\nuids = [0]\n");
  o = CheckConfig(config);
  CHECK(o.rc == 78);
  CHECK(o.output.find("twice") != std::string::npos);
  CHECK(fs::exists(tmp.path() + "/busy/thesis.tex"));
  CHECK_FALSE(fs::exists(tmp.path() + "/busy/EPOCH"));
}

TEST_CASE("Operator files: --log-level takes error, warn, info or debug, and says so otherwise") {
  FILE* p = ::popen("timeout -s KILL 10 " GPUCACHEFS_BIN " --log-level verbose /nonexistent.toml /tmp 2>&1", "r");
  REQUIRE(p);
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  int status = ::pclose(p);
  CHECK(WEXITSTATUS(status) == 64);
  CHECK(std::string(buf, n).find("--log-level must be error, warn, info or debug, not verbose") != std::string::npos);
}

TEST_CASE("Operator files: a reload of a FIFO or /dev/zero fails at once, is counted, and the next SIGHUP works") {
  MountedFs m;
  const std::string good = ReadText(m.config());
  for (const char* kind : {"fifo", "/dev/zero"}) {
    CAPTURE(kind);
    MakeBad(kind, m.config());
    size_t before = m.Log().size();
    REQUIRE(::kill(m.pid(), SIGHUP) == 0);
    std::string log;
    for (int i = 0; i < 500; ++i) {
      log = m.Log().substr(before);
      if (log.find("reload: ") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK_MESSAGE(log.find("reload: nothing changed") != std::string::npos, log);
    CHECK(log.find("not a regular file") != std::string::npos);
  }
  CHECK(ReadText(m.mnt() + "/.gpucache/metrics").find("gpucache_config_reloads_total{result=\"failed\"} 2") !=
        std::string::npos);
  // The next SIGHUP with a good file is served.
  fs::remove(m.config());
  Write(m.config(), good, 0644);
  size_t before = m.Log().size();
  REQUIRE(::kill(m.pid(), SIGHUP) == 0);
  bool reloaded = false;
  for (int i = 0; i < 500 && !reloaded; ++i) {
    reloaded = m.Log().substr(before).find("reload: configuration reloaded") != std::string::npos;
    if (!reloaded) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(reloaded);
  CHECK(ReadText(m.mnt() + "/.gpucache/metrics").find("gpucache_config_reloads_total{result=\"ok\"} 1") !=
        std::string::npos);
}

}  // namespace gpucache
