// gpucachectl: the admin tool for gpucache (docs/gpucachectl.md).
#include <CLI/CLI.hpp>

#include "ctl/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "gpucachectl: inspect and drive a gpucache KV-block store.\n"
      "Exit codes: 0 ok, 1 miss, 2 error, 64 bad usage."};
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 64;
  }
  if (*path) return gpucache::ctl::Path(identity, json);
  if (*lookup) return gpucache::ctl::Lookup(mountpoint, identity, json);
  if (*status) return gpucache::ctl::Status(mountpoint, json);
  if (*inspect) return gpucache::ctl::Inspect(block, verify, json);
  return 64;
}
