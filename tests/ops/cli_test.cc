// The command-line tools as an operator meets them (issue 17): versions and help, JSON for
// every outcome of gpucachectl --json, exit codes as docs/gpucachectl.md documents them, a
// cold command without the cold tier, and gpucache-client put of a block already there.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "clients/cpp/identity_file.h"
#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;
using nlohmann::json;

struct Run {
  int rc;
  std::string out, err;  // stdout and stderr, apart
};

Run Exec(const std::string& binary, const std::string& args) {
  TempDir tmp;
  std::string err_file = tmp.path() + "/stderr";
  std::string cmd = binary + " " + args + " 2>" + err_file;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, ReadText(err_file)};
}

Run Ctl(const std::string& args) { return Exec(GPUCACHECTL_BIN, args); }
Run Client(const std::string& args) { return Exec(GPUCACHE_CLIENT_BIN, args); }

// stdout of a --json run: exactly one JSON object, or a failed check.
json JsonOf(const Run& r) {
  json j = json::parse(r.out, nullptr, false);
  CHECK_MESSAGE(j.is_object(), "not one JSON object on stdout: " << r.out);
  return j.is_object() ? j : json::object();
}

std::string WriteIdentityToml(const std::string& dir, const CacheIdentity& id) {
  std::string path = dir + "/identity.toml";
  std::ofstream out(path);
  json fields = IdentityToJson(id);  // named: items() of a temporary would dangle
  for (auto& [k, v] : fields.items()) {
    if (k != "multimodal") out << k << " = " << v.dump() << "\n";  // JSON scalars are TOML here
  }
  return path;
}

TEST_CASE("cli: --version and --help exit 0 and say what they are") {
  for (auto [run, name] : {std::pair{Ctl("--version"), "gpucachectl"},
                           std::pair{Client("--version"), "gpucache-client"}}) {
    CAPTURE(name);
    CHECK(run.rc == 0);
    CHECK(run.out == std::string(name) + " " + GPUCACHE_VERSION + "\n");
  }
  Run help = Client("--help");
  CHECK(help.rc == 0);
  CHECK(help.out.find("gpucache-client put MOUNT IDENTITY.toml FILE") != std::string::npos);
  CHECK(Client("").rc == 64);  // usage on stderr, as bad usage
  CHECK(Client("put only-two").rc == 64);
  CHECK(Ctl("--help").rc == 0);
}

TEST_CASE("cli: gpucachectl --json prints JSON for local failures too, with the documented codes") {
  TempDir tmp;
  json not_mounted = JsonOf(Ctl("status --json " + tmp.path()));
  CHECK(not_mounted["ok"] == false);
  CHECK(not_mounted["errno"] == "ENOENT");
  CHECK(not_mounted["exit_code"] == 2);
  CHECK(not_mounted["error"].get<std::string>().find("is gpucachefs mounted there?") != std::string::npos);
  CHECK(Ctl("status --json " + tmp.path()).rc == 2);

  Run missing_identity = Ctl("path --json " + tmp.path() + "/none.toml");
  CHECK(missing_identity.rc == 64);
  CHECK(JsonOf(missing_identity)["exit_code"] == 64);
  CHECK(missing_identity.err.empty());

  // inspect of a path that does not exist: absent, exit 1 (it was 2 while the docs said 1).
  Run absent = Ctl("inspect --json " + tmp.path() + "/no-such-block");
  CHECK(absent.rc == 1);
  CHECK(JsonOf(absent)["errno"] == "ENOENT");
  CHECK(Ctl("inspect " + tmp.path() + "/no-such-block").rc == 1);
  std::ofstream(tmp.path() + "/junk") << "not a block";
  Run junk = Ctl("--json inspect " + tmp.path() + "/junk");  // --json before the subcommand too
  CHECK(junk.rc == 2);
  CHECK(JsonOf(junk)["error"].get<std::string>().find("not a valid gpucache block file") !=
        std::string::npos);

  Run usage = Ctl("evict --json");  // a missing argument: bad usage, still JSON
  CHECK(usage.rc == 64);
  CHECK(JsonOf(usage)["exit_code"] == 64);
  Run both = Ctl("drain --json --finish --rollback " + tmp.path());
  CHECK(both.rc == 64);
  CHECK(JsonOf(both)["error"].get<std::string>().find("not both") != std::string::npos);
  Run plain = Ctl("status " + tmp.path());  // without --json: text on stderr, nothing on stdout
  CHECK(plain.out.empty());
  CHECK(plain.err.find("gpucachectl: ") == 0);
}

TEST_CASE("cli: refusals from a mount: JSON with the exit code, cold tier not enabled, evict shape") {
  MountedFs m;
  json cold = JsonOf(Ctl("cold report --json " + m.mnt()));
  CHECK(cold["ok"] == false);
  CHECK(cold["errno"] == "ENOTSUP");
  CHECK(cold["exit_code"] == 2);
  CHECK(cold["error"].get<std::string>().find("cold tier is not enabled") != std::string::npos);
  Run cold_text = Ctl("cold failed " + m.mnt());
  CHECK(cold_text.rc == 2);
  CHECK(cold_text.err.find("cold tier is not enabled") != std::string::npos);

  Run evict = Ctl("evict " + m.mnt() + " acme/not-a-block-path");
  CHECK(evict.rc == 2);
  CHECK(evict.err.find("TENANT/NAMESPACE/BLOCK") != std::string::npos);
  CHECK(evict.err.find("given \"acme/not-a-block-path\"") != std::string::npos);

  CacheIdentity id = SampleIdentity();
  std::string toml = WriteIdentityToml(m.scratch(), id);
  Run miss = Ctl("lookup --json " + m.mnt() + " " + toml);
  CHECK(miss.rc == 1);
  CHECK(JsonOf(miss)["result"] == "miss");
}

// Regression (issue 17): a second put of a committed block failed with EEXIST and exit 2.
TEST_CASE("cli: gpucache-client put of a block already committed succeeds and says so") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  std::string toml = WriteIdentityToml(m.scratch(), id);
  std::string payload = m.scratch() + "/kv.bin";
  std::ofstream(payload) << std::string(5000, 'k');
  std::string path = MountClient(m.mnt()).PathOf(id);

  Run first = Client("put " + m.mnt() + " " + toml + " " + payload);
  CHECK(first.rc == 0);
  CHECK(first.out == path + "\n");
  Run again = Client("put " + m.mnt() + " " + toml + " " + payload);
  CHECK(again.rc == 0);
  CHECK(again.out == path + "\n");
  CHECK(again.err.find("already present") != std::string::npos);
  Run get = Client("get " + m.mnt() + " " + toml);
  CHECK(get.rc == 0);
  CHECK(get.out == std::string(5000, 'k'));

  // A block another writer is filling right now is not there yet: that stays an error.
  CacheIdentity other = SampleIdentity("acme", 3);
  std::string other_dir = m.scratch() + "/other";
  REQUIRE(::mkdir(other_dir.c_str(), 0700) == 0);
  std::string other_toml = WriteIdentityToml(other_dir, other);
  ::mkdir(NsDir(m, other).c_str(), 0770);  // the same namespace as `id`: EEXIST is fine
  int fd = ::open((MountClient(m.mnt()).PathOf(other) + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  Run busy = Client("put " + m.mnt() + " " + other_toml + " " + payload);
  CHECK(busy.rc == 2);
  CHECK(busy.err.find("another writer is filling this block") != std::string::npos);
  ::close(fd);

  Run no_file = Client("put " + m.mnt() + " " + toml + " " + m.scratch() + "/absent.bin");
  CHECK(no_file.rc == 2);
  CHECK(no_file.err.find("No such file or directory") != std::string::npos);
  Run no_mount = Client("get " + m.scratch() + " " + toml);
  CHECK(no_mount.rc == 1);  // nothing there: a miss
}

}  // namespace
}  // namespace gpucache
