// The command-line tools as an operator meets them (issue 17): versions and help, JSON for
// every outcome of gpucachectl --json, exit codes as docs/gpucachectl.md documents them, a
// cold command without the cold tier, and gpucache-client put of a block already there.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "clients/cpp/identity_file.h"
#include "store/block_file.h"
#include "store/checksum.h"
#include "tests/mount/mount_helpers.h"
#include "tests/support/tmpfs.h"

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
// gpucachectl run from the directory `cwd`.
Run CtlIn(const std::string& cwd, const std::string& args) {
  return Exec("cd '" + cwd + "' && " + GPUCACHECTL_BIN, args);
}
bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
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
  Run ctl_help = Ctl("--help");
  CHECK(ctl_help.rc == 0);
  // Every exit code of docs/gpucachectl.md's table, 3 (an incomplete cold pack) included.
  for (const char* code : {"0 ok", "1 miss", "2 error", "3 cold pack", "64 bad usage"}) {
    CHECK_MESSAGE(ctl_help.out.find(code) != std::string::npos, code);
  }
}

TEST_CASE("cli: gpucachectl --json prints JSON for local failures too, with the documented codes") {
  TempDir tmp;
  json not_mounted = JsonOf(Ctl("status --json " + tmp.path()));
  CHECK(not_mounted["ok"] == false);
  CHECK(not_mounted["errno"] == "ENODEV");
  CHECK(not_mounted["exit_code"] == 2);
  CHECK(not_mounted["error"].get<std::string>().find("not a gpucachefs mount") != std::string::npos);
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

  // A BLOCK of the wrong shape is bad usage, refused before the daemon is asked.
  Run evict = Ctl("evict " + m.mnt() + " acme/not-a-block-path");
  CHECK(evict.rc == 64);
  CHECK(evict.err.find("TENANT/NAMESPACE/BLOCK") != std::string::npos);
  CHECK(evict.err.find("given \"acme/not-a-block-path\"") != std::string::npos);

  CacheIdentity id = SampleIdentity();
  std::string toml = WriteIdentityToml(m.scratch(), id);
  Run miss = Ctl("lookup --json " + m.mnt() + " " + toml);
  CHECK(miss.rc == 1);
  CHECK(JsonOf(miss)["result"] == "miss");
}

// Regression: `gpucachectl frobnicate` said only "A subcommand is required".
TEST_CASE("cli: an unknown command is named, with the commands there are (exit 64)") {
  Run r = Ctl("frobnicate");
  CHECK(r.rc == 64);
  CHECK(Has(r.err, "`frobnicate` is not a gpucachectl command"));
  CHECK(!Has(r.err, "A subcommand is required"));
  for (const char* name : {"path", "lookup", "status", "inspect", "evict", "pin", "cold"}) {
    CAPTURE(name);
    CHECK(Has(r.err, name));
  }
  CHECK(r.out.empty());
  Run typo = Ctl("stauts /mnt/gpucache");
  CHECK(typo.rc == 64);
  CHECK(Has(typo.err, "did you mean `status`?"));
  Run as_json = Ctl("--json frobnicate");
  CHECK(as_json.rc == 64);
  CHECK(JsonOf(as_json)["exit_code"] == 64);
  std::string error = JsonOf(as_json)["error"];
  CHECK(Has(error, "`frobnicate` is not a gpucachectl command"));
  Run cold = Ctl("cold frobnicate /mnt/gpucache");
  CHECK(cold.rc == 64);
  CHECK(Has(cold.err, "`frobnicate` is not a gpucachectl cold command"));
  CHECK(Has(cold.err, "purge-tenant"));
  Run none = Ctl("");
  CHECK(none.rc == 64);
  CHECK(Has(none.err, "gpucachectl needs a command: path, lookup"));
  CHECK(Ctl("cold").rc == 64);
  CHECK(Ctl("cold --help").rc == 0);  // --help still answers, anywhere
  CHECK(Ctl("status --help").rc == 0);
}

// Regression: `reclaim --fenced -5` sent 2^64-5 (CLI11 reads "-5" through strtoull).
TEST_CASE("cli: every numeric argument refuses negative and non-numeric values (exit 64)") {
  TempDir tmp;
  std::string mnt = tmp.path();  // refused before any mount is asked
  std::ofstream(tmp.path() + "/id.toml") << "tenant = \"acme\"\n";
  for (std::string args : {"reclaim " + mnt + " --fenced -5", "reclaim " + mnt + " --fenced=-5",
                           "reclaim " + mnt + " --drained -1", "reclaim " + mnt + " --fenced abc",
                           "reclaim " + mnt + " --fenced 1e3", "reclaim " + mnt + " --fenced +5",
                           "reclaim " + mnt + " --fenced 0x10",
                           "reclaim " + mnt + " --fenced 99999999999999999999",
                           "cold pack " + mnt + " --budget -1",
                           "cold refill " + mnt + " " + tmp.path() + "/id.toml --budget -1",
                           "cold reseal " + mnt + " --budget -2", "cold retry " + mnt + " -5",
                           "cold drop " + mnt + " x", "cold retain " + mnt + " abc -5",
                           "cold purge-tenant " + mnt + " acme --max-manifests -3",
                           "cold sweep " + mnt + " --older-than -3600",
                           "cold sweep " + mnt + " --max-deletes -1"}) {
    CAPTURE(args);
    Run r = Ctl(args);
    CHECK(r.rc == 64);
    CHECK((Has(r.err, "expected a whole number") || Has(r.err, "is too large")));
    Run j = Ctl("--json " + args);
    CHECK(j.rc == 64);
    CHECK(JsonOf(j)["exit_code"] == 64);
  }
  CHECK(Has(Ctl("reclaim " + mnt + " --fenced -5").err, "got \"-5\""));
  // A number that is fine gets as far as the mount (none here: exit 2).
  CHECK(Ctl("reclaim " + mnt + " --fenced 5").rc == 2);
  CHECK(Ctl("cold retain " + mnt + " abc 0").rc == 2);
}

TEST_CASE("cli: evict, pin and unpin take the block in the forms an operator types") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  REQUIRE(MountClient(m.mnt()).Commit(id, Payload(1000)) == 0);
  BlockAddress a = AddressOf(id);
  std::string rel = a.RelativePath(), abs = m.mnt() + "/" + rel;

  CHECK(Ctl("pin " + m.mnt() + " " + rel).out == "pin: " + rel + "\n");  // relative to the mount
  CHECK(Ctl("unpin " + m.mnt() + " " + abs).out == "unpin: " + rel + "\n");  // absolute
  std::string messy = m.mnt() + "//" + a.tenant + "/./" + a.ns + "/" + a.block;
  CHECK(Ctl("pin " + m.mnt() + "/ " + messy).rc == 0);
  // Relative to the current directory: inside the namespace, and from above the mount.
  CHECK(CtlIn(NsDir(m, id), "unpin " + m.mnt() + " " + a.block).out == "unpin: " + rel + "\n");
  CHECK(CtlIn(m.scratch(), "pin mnt mnt/" + rel).out == "pin: " + rel + "\n");
  CHECK(CtlIn(m.mnt() + "/" + a.tenant, "unpin ../ ./" + a.ns + "/" + a.block).rc == 0);
  // Through a symlink to the mount.
  std::string link = m.scratch() + "/link";
  REQUIRE(::symlink(m.mnt().c_str(), link.c_str()) == 0);
  CHECK(Ctl("pin " + m.mnt() + " " + link + "/" + rel).out == "pin: " + rel + "\n");
  CHECK(Ctl("unpin " + link + " " + abs).out == "unpin: " + rel + "\n");

  // Wrong forms: exit 64, saying what is wrong and which forms are accepted, with examples.
  Run shape = Ctl("evict " + m.mnt() + " default/ns/blk");
  CHECK(shape.rc == 64);
  CHECK(Has(shape.err, "given \"default/ns/blk\""));
  CHECK(Has(shape.err, "\"ns\" is not a namespace name"));
  CHECK(Has(shape.err, "TENANT/NAMESPACE/BLOCK relative to the mount"));
  CHECK(Has(shape.err, "e.g. default/Llama-3.1-8B.bf16.tp0of2.pp0of1-"));
  CHECK(Has(shape.err, "e.g. " + m.mnt() + "/default/Llama-3.1-8B.bf16.tp0of2.pp0of1-"));
  Run part = Ctl("pin " + m.mnt() + " " + abs + ".part");
  CHECK(part.rc == 64);
  CHECK(Has(part.err, "is a fill in progress, not a block"));
  Run outside = Ctl("pin " + m.mnt() + " " + m.scratch() + "/kv.bin");
  CHECK(outside.rc == 64);
  CHECK(Has(outside.err, "it is not a path inside " + m.mnt()));
  Run dir = Ctl("--json evict " + m.mnt() + " " + NsDir(m, id));
  CHECK(dir.rc == 64);
  CHECK(Has(JsonOf(dir)["error"].get<std::string>(), "a block path has 3 parts"));

  CHECK(Ctl("evict " + m.mnt() + " " + abs).out == "evict: " + rel + "\n");
  CHECK(Ctl("evict " + m.mnt() + " " + rel).rc == 2);  // the right shape, gone: the daemon says so
}

// Regression: `status MNT/acme` looked for MNT/acme/.gpucache/ctl and failed.
TEST_CASE("cli: a folder inside the mount stands for the mount") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  REQUIRE(MountClient(m.mnt()).Commit(id, Payload(1000)) == 0);
  for (std::string folder : {m.mnt() + "/acme", m.mnt() + "/acme/", NsDir(m, id)}) {
    CAPTURE(folder);
    Run r = Ctl("status " + folder);
    CHECK(r.rc == 0);
    CHECK(Has(r.out, "mountpoint: " + m.mnt() + "\n"));
    CHECK(Has(r.out, "acme"));
    CHECK(Ctl("quarantine " + folder).rc == 0);
  }
  CHECK(CtlIn(NsDir(m, id), "status --json .").rc == 0);
  CHECK(Ctl("status " + m.mnt()).out.find("mountpoint: " + m.mnt() + "\n") == 0);  // as typed
  Run outside = Ctl("status " + m.scratch());  // not in a mount
  CHECK(outside.rc == 2);
  CHECK(Has(outside.err, "not a gpucachefs mount"));
}

// Regression: a uid in no tenant saw an empty table and no word why.
TEST_CASE("cli: status says when the caller is a member of no tenant") {
  MountedFs m;
  int stranger = AsUser(3000, 3000, [&] {
    Run r = Ctl("status " + m.mnt());
    bool hint = Has(r.out, "uid 3000") && Has(r.out, "is a member of no tenant") &&
                Has(r.out, "admins see every tenant");
    return r.rc == 0 && hint ? 0 : 1;
  });
  CHECK(stranger == 0);
  int member = AsUser(2000, 2000, [&] {
    Run r = Ctl("status " + m.mnt());
    return r.rc == 0 && Has(r.out, "globex") && !Has(r.out, "member of no tenant") ? 0 : 1;
  });
  CHECK(member == 0);
  CHECK(!Has(Ctl("status " + m.mnt()).out, "member of no tenant"));  // root: admin
}

// Regression: over a crashed daemon's mount (ENOTCONN) gpucachectl asked "is gpucachefs
// mounted there?", which it is, stale.
TEST_CASE("cli: a stale mount is named as such, with the command that clears it") {
  MountedFs m;
  ::kill(m.pid(), SIGKILL);  // the fixture reaps it and unmounts at the end
  struct stat st;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(::stat(m.mnt().c_str(), &st) != 0 && errno == ENOTCONN) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(::stat(m.mnt().c_str(), &st) != 0);
  REQUIRE(errno == ENOTCONN);
  for (std::string where : {m.mnt(), m.mnt() + "/acme"}) {
    CAPTURE(where);
    Run r = Ctl("status " + where);
    CHECK(r.rc == 2);
    CHECK(Has(r.err, m.mnt() + ": stale mount (the daemon that served it is gone)"));
    CHECK(Has(r.err, "run `fusermount3 -u -z " + m.mnt() + "`"));
    CHECK(!Has(r.err, "is gpucachefs mounted there?"));
  }
  json j = JsonOf(Ctl("--json fence " + m.mnt()));
  CHECK(j["errno"] == "ENOTCONN");
  CHECK(j["exit_code"] == 2);
  // Through a link to it too (the mount table cannot resolve it: reread of 4e2425b).
  const std::string link = m.scratch() + "/link";
  REQUIRE(::symlink(m.mnt().c_str(), link.c_str()) == 0);
  Run r = Ctl("status " + link);
  CHECK(r.rc == 2);
  CHECK(Has(r.err, link + ": stale mount"));
}

// Regression (review, 2026-12-07): isolate found a data directory only by its resolved path:
// the configuration's own spelling through a link, "DIR/" or a relative path got ENOENT.
TEST_CASE("cli: isolate takes a data directory as configured, with a trailing slash, or relative") {
  TempDir dirs;
  REQUIRE(::mkdir((dirs.path() + "/real0").c_str(), 0755) == 0);
  REQUIRE(::symlink((dirs.path() + "/real0").c_str(), (dirs.path() + "/link0").c_str()) == 0);
  const std::string d0 = dirs.path() + "/link0", d1 = dirs.path() + "/nvme1";
  MountedFs m("data_dirs = [\"" + d0 + "\", \"" + d1 + "\"]\n" + TestConfig());
  Run first = Ctl("isolate " + m.mnt() + " " + d0);  // as the configuration spells it
  CHECK(first.rc == 0);
  CHECK(Has(first.out, "isolated " + d0));
  CHECK(JsonOf(Ctl("status --json " + m.mnt()))["data_dirs"][0]["isolated"] == true);
  // Isolated already: each other spelling finds it too (ENOENT if it did not).
  CHECK(Ctl("isolate " + m.mnt() + " " + d0 + "/").rc == 0);
  CHECK(CtlIn(dirs.path(), "isolate " + m.mnt() + " link0").rc == 0);
  CHECK(CtlIn(dirs.path(), "isolate " + m.mnt() + " ./real0/").rc == 0);
  CHECK(Ctl("isolate " + m.mnt() + " " + dirs.path() + "/elsewhere").rc == 2);
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
  // No gpucachefs at MOUNT is an error, as gpucachectl says it, not a miss (found by review: a
  // script saw "cache miss" where gpucache was down).
  Run no_mount = Client("get " + m.scratch() + " " + toml);
  CHECK(no_mount.rc == 2);
  CHECK(Has(no_mount.err, "not a gpucachefs mount"));
}

TEST_CASE("cli: gpucache-client put of a FILE it cannot read says so and exits 2") {
  // Found by review: a directory (EISDIR on read) threw out of main: abort, exit 134.
  MountedFs m;
  std::string toml = WriteIdentityToml(m.scratch(), SampleIdentity());
  Run dir = Client("put " + m.mnt() + " " + toml + " " + m.scratch());
  CHECK(dir.rc == 2);
  CHECK(Has(dir.err, "cannot read " + m.scratch() + ": Is a directory"));
}

// Found by review (2026-12-06): a FILE larger than memory (an 8 TB sparse file) aborted put
// (bad_alloc out of the reserve: exit 134), an empty FILE was a bare "Invalid argument", a put
// with no gpucachefs at MOUNT wrote into the plain directory when it had the tenant's folder,
// and an unknown tenant was a miss (exit 1), so a script recomputed forever.
TEST_CASE("cli: gpucache-client names an empty or huge FILE, a missing daemon and an unknown tenant") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  std::string toml = WriteIdentityToml(m.scratch(), id);

  std::string empty = m.scratch() + "/empty.bin";
  std::ofstream(empty).close();
  Run put_empty = Client("put " + m.mnt() + " " + toml + " " + empty);
  CHECK(put_empty.rc == 2);
  CHECK(Has(put_empty.err, "is empty"));

  std::string huge = m.scratch() + "/huge.bin";
  { std::ofstream(huge).close(); }
  REQUIRE(::truncate(huge.c_str(), off_t{1} << 43) == 0);  // 8 TiB, a hole
  Run put_huge = Client("put " + m.mnt() + " " + toml + " " + huge);
  CHECK(put_huge.rc == 2);
  CHECK(Has(put_huge.err, "too large"));

  // A plain directory that has the tenant's and namespace's folders: nothing is written there.
  std::string plain = m.scratch() + "/plain";
  BlockAddress a = AddressOf(id);
  REQUIRE(::mkdir(plain.c_str(), 0755) == 0);
  REQUIRE(::mkdir((plain + "/" + a.tenant).c_str(), 0755) == 0);
  std::string payload = m.scratch() + "/kv.bin";
  std::ofstream(payload) << std::string(5000, 'k');
  Run put_plain = Client("put " + plain + " " + toml + " " + payload);
  CHECK(put_plain.rc == 2);
  CHECK(Has(put_plain.err, "not a gpucachefs mount"));
  struct stat st;
  CHECK(::stat((plain + "/" + a.tenant + "/" + a.ns).c_str(), &st) != 0);

  CacheIdentity stranger = SampleIdentity("zzz");
  std::string stranger_dir = m.scratch() + "/stranger";
  REQUIRE(::mkdir(stranger_dir.c_str(), 0700) == 0);
  std::string stranger_toml = WriteIdentityToml(stranger_dir, stranger);
  Run get_unknown = Client("get " + m.mnt() + " " + stranger_toml);
  CHECK(get_unknown.rc == 2);
  CHECK(Has(get_unknown.err, "no tenant 'zzz'"));
  Run put_unknown = Client("put " + m.mnt() + " " + stranger_toml + " " + payload);
  CHECK(put_unknown.rc == 2);
  CHECK(Has(put_unknown.err, "no tenant 'zzz'"));
}

// Found by review (2026-12-06): `rope_theta = -nan` gave gpucache-client and the Python client
// different paths (toml++ drops a NaN's sign; Python's tomllib keeps it).
TEST_CASE("cli: an identity file with a NaN float is refused, naming the _bits form") {
  MountedFs m;
  std::string toml = WriteIdentityToml(m.scratch(), SampleIdentity());
  std::string text = ReadText(toml);
  size_t at = text.find("rope_theta_bits = ");
  REQUIRE(at != std::string::npos);
  text.replace(at, text.find('\n', at) - at, "rope_theta = -nan");
  std::ofstream(toml) << text;
  Run get = Client("get " + m.mnt() + " " + toml);
  CHECK(get.rc == 64);
  CHECK(Has(get.err, "rope_theta_bits"));
  CHECK(Has(get.err, "NaN"));
}

// Found by review (2026-12-06): get wrote OUT in place (fopen "wb" empties it first), so a write
// that failed (ENOSPC) left a truncated OUT where a whole file had been, with exit 2.
TEST_CASE("cli: gpucache-client get that cannot write OUT leaves OUT as it was") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  std::string toml = WriteIdentityToml(m.scratch(), id);
  REQUIRE(MountClient(m.mnt()).Commit(id, Payload(200000)) == 0);
  Tmpfs small(m.scratch() + "/small", "64k");
  REQUIRE(small.mounted());
  std::string out = small.path() + "/out.bin";
  std::ofstream(out) << "the previous contents";
  Run full = Client("get " + m.mnt() + " " + toml + " " + out);
  CHECK(full.rc == 2);
  CHECK(Has(full.err, "cannot write"));
  CHECK(ReadText(out) == "the previous contents");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(small.path())) files += e.is_regular_file();
  CHECK(files == 1);  // OUT, and no temporary left behind
  // Where it fits, OUT is replaced whole.
  std::string roomy = m.scratch() + "/out.bin";
  std::ofstream(roomy) << "old";
  Run ok = Client("get " + m.mnt() + " " + toml + " " + roomy);
  CHECK(ok.rc == 0);
  CHECK(ReadText(roomy).size() == 200000);
}

TEST_CASE("cli: inspect --verify reads a block file in bounded pieces whatever its header says") {
  // Found by review: the header's chunk size (up to 4 GiB; its seal anyone can recompute) sized
  // the read buffer: 4 GiB resident, or bad_alloc and an abort under a memory limit.
  TempDir tmp;
  const Bytes payload = Payload(100);
  BlockHeader h;
  h.payload_length = payload.size();
  h.identity = EncodePhysicalKey(SampleIdentity());
  h.checksums = ComputeChecksums(payload);
  h.checksums.chunk_size = 0xffffffffu;  // one chunk all the same
  Bytes file = EncodeBlockHeader(h);
  file.resize(h.data_offset);
  file.insert(file.end(), payload.begin(), payload.end());
  const std::string path = tmp.path() + "/crafted";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()),
                                              static_cast<std::streamsize>(file.size()));
  Run r = Exec("ulimit -v 1000000; " + std::string(GPUCACHECTL_BIN), "inspect --verify " + path);
  // Since the block format refuses a chunk size other than ChunkSizeFor's, such a header is
  // damaged: said without reading (or allocating) anything of the payload.
  CHECK(r.rc == 2);
  CHECK_FALSE(Has(r.out, "verified: ok"));

  // A well-formed file damaged: with --json the failure carries "ok", "error" and "exit_code"
  // like every other (found by review: the report alone, exit 2).
  h.checksums = ComputeChecksums(payload);
  file = EncodeBlockHeader(h);
  file.resize(h.data_offset);
  file.insert(file.end(), payload.begin(), payload.end());
  file.back() ^= 1;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(file.data()),
                                              static_cast<std::streamsize>(file.size()));
  Run bad = Ctl("inspect --verify --json " + path);
  CHECK(bad.rc == 2);
  json j = JsonOf(bad);
  CHECK(j["ok"] == false);
  CHECK(j["exit_code"] == 2);
  CHECK(j["verified"] == "chunk 0 does not match");
  CHECK(Has(j.value("error", ""), "verification failed"));
  Run text = Ctl("inspect --verify " + path);
  CHECK(text.rc == 2);
  CHECK(Has(text.err, "verification failed: chunk 0 does not match"));
}

// Regression (review, 2026-12-07): a request went into whatever .gpucache/ctl the directory
// held, through a symlink too: root running `gpucachectl fence DIR` against a directory someone
// else controls (a mountpoint whose daemon stopped) overwrote the file the link named.
TEST_CASE("cli: a directory no gpucachefs mount holds gets no request, not even through its own ctl") {
  TempDir tmp;
  REQUIRE(::mkdir((tmp.path() + "/.gpucache").c_str(), 0755) == 0);
  std::ofstream(tmp.path() + "/victim") << "root's file\n";
  REQUIRE(::symlink((tmp.path() + "/victim").c_str(), (tmp.path() + "/.gpucache/ctl").c_str()) == 0);
  for (std::string command : {"fence ", "status ", "cold report "}) {
    CAPTURE(command);
    Run r = Ctl(command + tmp.path());
    CHECK(r.rc == 2);
    CHECK(Has(r.err, tmp.path() + ": not a gpucachefs mount"));
  }
  std::ifstream in(tmp.path() + "/victim");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "root's file\n");
  // A plain file in its place is left alone as well.
  REQUIRE(::unlink((tmp.path() + "/.gpucache/ctl").c_str()) == 0);
  std::ofstream(tmp.path() + "/.gpucache/ctl") << "";
  CHECK(Ctl("fence " + tmp.path()).rc == 2);
  CHECK(std::filesystem::file_size(tmp.path() + "/.gpucache/ctl") == 0);
}

TEST_CASE("cli: identity files that are not files are named") {
  // Found by review: "identity key 'tenant': missing" for a directory given as the identity
  // file; no line for a TOML error. (A reply that is no gpucachefs's is named too, "not one of
  // a gpucachefs this gpucachectl understands": only a FUSE mount can give one now.)
  TempDir tmp;
  Run dir = Ctl("path " + tmp.path());
  CHECK(dir.rc == 64);
  CHECK(Has(dir.err, tmp.path() + ": a directory, not an identity file"));
  std::ofstream(tmp.path() + "/broken.toml") << "tenant = \"acme\"\nchain = [\n";
  Run broken = Ctl("path " + tmp.path() + "/broken.toml");
  CHECK(broken.rc == 64);
  CHECK(Has(broken.err, "broken.toml:2:"));
}

TEST_CASE("cli: inspect --json gives epoch, region and valid_length as numbers, mounted or offline") {
  MountedFs m;
  CacheIdentity id = SampleIdentity();
  REQUIRE(MountClient(m.mnt()).Commit(id, Payload(1000)) == 0);
  json mounted = JsonOf(Ctl("inspect --json " + MountClient(m.mnt()).PathOf(id)));
  json offline = JsonOf(Ctl("inspect --json " + m.data() + "/blocks/" + AddressOf(id).RelativePath()));
  for (const char* key : {"epoch", "region"}) {
    CAPTURE(key);
    CHECK(mounted[key].is_number());
    CHECK(mounted[key] == offline[key]);
  }
  CHECK(mounted["valid_length"] == id.valid_length);
}

}  // namespace
}  // namespace gpucache
