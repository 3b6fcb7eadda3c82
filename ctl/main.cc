// gpucachectl: the admin tool for gpucache (docs/gpucachectl.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <vector>

#include "ctl/channel.h"

#include "ctl/cold_commands.h"
#include "ctl/commands.h"

namespace {

// Every number gpucachectl takes is an epoch, a region, a byte budget, a job id, seconds or a
// count: decimal digits only, at most 2^64-1. (CLI11 alone reads "-5" as 2^64-5, "010" as 8
// and "99999999999999999999" as 2^64-1.)
const CLI::Validator kWholeNumber(
    [](std::string& s) -> std::string {
      if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
        return "expected a whole number of 0 or more in decimal digits, got \"" + s + "\"";
      }
      uint64_t v = 0;
      if (std::from_chars(s.data(), s.data() + s.size(), v).ec != std::errc()) {
        return "\"" + s + "\" is too large (at most 18446744073709551615)";
      }
      s = std::to_string(v);  // leading zeros are not octal
      return "";
    },
    "");

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The commands of `level`, "a, b, c", and the one `word` may be a typo of (or empty).
std::string CommandNames(CLI::App* level, const std::string& word, std::string& close) {
  std::string names;
  for (CLI::App* s : level->get_subcommands([](CLI::App*) { return true; })) {
    const std::string& name = s->get_name();
    names += (names.empty() ? "" : ", ") + name;
    bool near = !word.empty() && (name.starts_with(word) ||
                                  EditDistance(word, name) <= std::max<size_t>(1, word.size() / 3));
    if (close.empty() && near) close = name;
  }
  return names;
}

// The first word that is not an option names a command (and after `cold`, a cold command).
// When it names none, or there is none: a message saying so, with the commands there are
// (CLI11 would only say "A subcommand is required"). Empty when the words are fine, or for
// --help and --version.
std::string UnknownCommand(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string where = "gpucachectl";
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--help" || word == "-h" || word == "--version") return "";
    if (word.starts_with("-")) continue;
    std::vector<CLI::App*> subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return "";  // the command's own arguments
    auto sub = std::find_if(subs.begin(), subs.end(),
                            [&](CLI::App* s) { return s->get_name() == word; });
    if (sub != subs.end()) {
      level = *sub;
      where += " " + word;
      continue;
    }
    std::string close, names = CommandNames(level, word, close);
    return "`" + word + "` is not a " + where + " command" +
           (close.empty() ? "" : " (did you mean `" + close + "`?)") + "; " + where +
           " commands: " + names + " (run `" + where + " --help` for usage)";
  }
  if (level->get_subcommands([](CLI::App*) { return true; }).empty()) return "";
  std::string close, names = CommandNames(level, "", close);
  return where + " needs a command: " + names + " (run `" + where + " --help` for usage)";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpucachectl: inspect and drive a gpucache KV-block store.\n"
      "Exit codes: 0 ok, 1 miss (or absent), 2 error, 3 cold pack, purge-tenant or sweep not complete,\n"
      "64 bad usage or invalid identity file."};
  app.set_version_flag("--version", "gpucachectl " GPUCACHE_VERSION);
  app.require_subcommand(1);
  bool json = false;
  app.add_flag("--json", json, "print machine-readable JSON");

  std::string identity, mountpoint, block;
  bool verify = false;
  auto* path = app.add_subcommand("path", "print <tenant>/<namespace>/<block> for an identity (offline)");
  path->add_option("IDENTITY", identity, "identity TOML file (docs/identity-encoding.md)")->required();
  path->add_flag("--json", json, "print machine-readable JSON");

  auto* lookup = app.add_subcommand("lookup", "ask the daemon: hit, prefix hit, or miss and why");
  lookup->add_option("MOUNTPOINT", mountpoint)->required();
  lookup->add_option("IDENTITY", identity, "identity TOML file")->required();
  lookup->add_flag("--json", json, "print machine-readable JSON");

  auto* status = app.add_subcommand("status", "epoch and per-tenant counters of a mount");
  status->add_option("MOUNTPOINT", mountpoint)->required();
  status->add_flag("--json", json, "print machine-readable JSON");

  auto* inspect = app.add_subcommand(
      "inspect", "identity, state, checksums and sizes of a block (in a mount, or a backing file)");
  inspect->add_option("BLOCKPATH", block)->required();
  inspect->add_flag("--verify", verify, "read the whole payload and check every checksum");
  inspect->add_flag("--json", json, "print machine-readable JSON");

  auto* fence = app.add_subcommand("fence", "bump the epoch: every in-flight fill is fenced (ESTALE)");
  fence->add_option("MOUNTPOINT", mountpoint)->required();
  fence->add_flag("--json", json, "print machine-readable JSON");

  std::optional<uint64_t> fenced_epoch, drained_region;
  auto* reclaim = app.add_subcommand(
      "reclaim", "free quarantined blocks: all of them after a fence, or one drained region");
  reclaim->add_option("MOUNTPOINT", mountpoint)->required();
  reclaim->add_option("--fenced", fenced_epoch, "the epoch the last fence returned (admin)")
      ->check(kWholeNumber);
  reclaim->add_option("--drained", drained_region, "a region its holder attests is drained")
      ->check(kWholeNumber);
  reclaim->add_flag("--json", json, "print machine-readable JSON");

  auto* quarantine = app.add_subcommand("quarantine", "list quarantined blocks");
  quarantine->add_option("MOUNTPOINT", mountpoint)->required();
  quarantine->add_flag("--json", json, "print machine-readable JSON");

  bool finish = false, rollback = false;
  auto* drain = app.add_subcommand(
      "drain", "rolling upgrade: refuse new fills (EROFS); --finish fences, --rollback resumes");
  drain->add_option("MOUNTPOINT", mountpoint)->required();
  drain->add_flag("--finish", finish, "end the drain with a fence (before the restart)");
  drain->add_flag("--rollback", rollback, "cancel a drain that has not finished");
  drain->add_flag("--json", json, "print machine-readable JSON");

  std::string dir;
  auto* isolate = app.add_subcommand(
      "isolate", "take one data directory (a failed device) out of service; its blocks become misses");
  isolate->add_option("MOUNTPOINT", mountpoint)->required();
  isolate->add_option("DIR", dir, "a data directory from the configuration")->required();
  isolate->add_flag("--json", json, "print machine-readable JSON");

  std::string sysfs = "/sys", proc = "/proc", dev = "/dev";
  auto* discover = app.add_subcommand(
      "discover", "list block devices and suggest data directories (reads only; never writes)");
  discover->add_option("--sysfs", sysfs, "sysfs root")->capture_default_str();
  discover->add_option("--proc", proc, "procfs root")->capture_default_str();
  discover->add_option("--dev", dev, "device node directory")->capture_default_str();
  discover->add_flag("--json", json, "print machine-readable JSON");

  std::map<std::string, CLI::App*> block_ops;
  for (auto [name, help] : {std::pair{"evict", "evict a block now (admin; quarantined if open)"},
                            std::pair{"pin", "never evict a block"},
                            std::pair{"unpin", "let a block be evicted again"}}) {
    auto* sub = app.add_subcommand(name, help);
    sub->add_option("MOUNTPOINT", mountpoint)->required();
    sub->add_option("BLOCK", block, "TENANT/NAMESPACE/BLOCK, or the block's path in the mount")
        ->required();
    sub->add_flag("--json", json, "print machine-readable JSON");
    block_ops[name] = sub;
  }

  gpucache::ctl::ColdArgs cold_args;
  auto* cold = app.add_subcommand("cold", "the S3 cold tier: pack, refill, report, failed jobs, reclaim");
  cold->require_subcommand(1);
  std::map<std::string, CLI::App*> cold_ops;
  auto cold_op = [&](const char* name, const char* help) {
    auto* sub = cold->add_subcommand(name, help);
    sub->add_option("MOUNTPOINT", cold_args.mountpoint)->required();
    sub->add_flag("--json", json, "print machine-readable JSON");
    cold_ops[name] = sub;
    return sub;
  };
  auto* cpack = cold_op("pack", "pack committed blocks without a cold copy and upload them");
  cpack->add_option("--tenant", cold_args.tenant, "only this tenant (members may pack their own)");
  cpack->add_option("--budget", cold_args.budget, "stop before this many payload bytes")
      ->check(kWholeNumber);
  auto* crefill = cold_op("refill", "fetch a block from the cold tier into the hot tier (exit 1: missing)");
  crefill->add_option("IDENTITY", cold_args.identity_file, "identity TOML file")->required();
  crefill->add_option("--budget", cold_args.budget, "refuse blocks larger than this many bytes")
      ->check(kWholeNumber);
  cold_op("report", "sink and refill counters (admin)");
  cold_op("failed", "list the failed upload jobs (admin)");
  cold_op("retry", "move a failed job back to the queue (admin)")
      ->add_option("JOB", cold_args.job, "job id from `cold failed`")
      ->required()
      ->check(kWholeNumber);
  cold_op("drop", "forget a failed job (admin)")
      ->add_option("JOB", cold_args.job, "job id from `cold failed`")
      ->required()
      ->check(kWholeNumber);
  cold_op("drain", "upload every pending job now (admin)");
  cold_op("reclaim", "delete a manifest and what only it references, each delete confirmed")
      ->add_option("MANIFEST", cold_args.manifest, "the manifest's 64-hex-digit digest")->required();
  auto* creseal = cold_op("reseal", "re-seal cold objects under the keyring's current key (admin)");
  creseal->add_option("--budget", cold_args.budget, "stop after about this many bytes read and written")
      ->check(kWholeNumber);
  creseal->add_option("--after", cold_args.after, "continue after this manifest key (from a previous run)");
  auto* cretain = cold_op("retain", "keep a manifest from reclaim for SECONDS (admin)");
  cretain->add_option("MANIFEST", cold_args.manifest, "the manifest's digest")->required();
  cretain->add_option("SECONDS", cold_args.seconds)->check(kWholeNumber)->required();
  auto* cpurge = cold_op("purge-tenant", "delete a retired tenant's cold objects, in bounded batches (admin)");
  cpurge->add_option("TENANT", cold_args.tenant, "a tenant listed in [cold] retired_tenants")->required();
  cpurge->add_option("--max-manifests", cold_args.max_manifests, "manifests per request, 1 to 100000 (default 100)")
      ->check(kWholeNumber)
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000}));
  auto* csweep = cold_op("sweep", "delete pack objects no manifest names, once old enough (admin)");
  csweep->add_option("--older-than", cold_args.older_than,
                     "only orphans written at least this many seconds ago, 3600 at the least (default 86400)")
      ->check(kWholeNumber)
      ->check(CLI::Range(uint64_t{3600}, uint64_t{316224000}));
  csweep->add_option("--max-deletes", cold_args.max_deletes, "deletes per request, 1 to 100000 (default 100)")
      ->check(kWholeNumber)
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000}));

  // --json anywhere asks for JSON on every outcome, bad usage included (before parsing, which
  // may fail before the flag is seen).
  for (int i = 1; i < argc; ++i) json = json || std::strcmp(argv[i], "--json") == 0;
  gpucache::ctl::SetJsonOutput(json);
  if (std::string unknown = UnknownCommand(app, argc, argv); !unknown.empty()) {
    return gpucache::ctl::Fail(unknown, 64);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0 || !json) {  // --help, --version, or a person reading stderr
      int rc = app.exit(e);
      return rc == 0 ? 0 : 64;
    }
    return gpucache::ctl::Fail(std::string(e.what()) + " (run with --help for usage)", 64);
  }
  // MOUNTPOINT may be any folder inside the mount (MNT/acme/ns): talk to the mount holding it.
  if (!mountpoint.empty()) mountpoint = gpucache::ctl::ResolveMount(mountpoint);
  if (!cold_args.mountpoint.empty()) {
    cold_args.mountpoint = gpucache::ctl::ResolveMount(cold_args.mountpoint);
  }
  auto dispatch = [&]() -> int {
    if (*path) return gpucache::ctl::Path(identity, json);
    if (*lookup) return gpucache::ctl::Lookup(mountpoint, identity, json);
    if (*status) return gpucache::ctl::Status(mountpoint, json);
    if (*inspect) return gpucache::ctl::Inspect(block, verify, json);
    if (*fence) return gpucache::ctl::Fence(mountpoint, json);
    if (*reclaim) return gpucache::ctl::Reclaim(mountpoint, fenced_epoch, drained_region, json);
    if (*quarantine) return gpucache::ctl::Quarantine(mountpoint, json);
    if (*drain) {
      if (finish && rollback) return gpucache::ctl::Fail("drain takes --finish or --rollback, not both", 64);
      return gpucache::ctl::Drain(mountpoint, finish ? "finish" : rollback ? "rollback" : "start", json);
    }
    if (*isolate) return gpucache::ctl::Isolate(mountpoint, dir, json);
    if (*discover) return gpucache::ctl::Discover(sysfs, proc, dev, json);
    for (auto& [name, sub] : cold_ops) {
      if (*sub) return gpucache::ctl::Cold(name, cold_args, json);
    }
    for (auto& [name, sub] : block_ops) {
      if (*sub) return gpucache::ctl::BlockOp(mountpoint, name, block, json);
    }
    return 64;
  };
  // A reply that lacks a field a command reads (a gpucachefs of another version, or something
  // else answering at .gpucache/ctl) is an error to report, not an abort.
  try {
    return dispatch();
  } catch (const nlohmann::json::exception& e) {
    return gpucache::ctl::Fail(std::string("a reply this gpucachectl does not understand (") + e.what() +
                                   "); is a gpucachefs of another version mounted there?",
                               2);
  }
}
