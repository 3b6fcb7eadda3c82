// Filesystem::Reload: what a SIGHUP may change while the mount serves (docs/configuration.md).
#include <algorithm>
#include <sstream>

#include "fs/filesystem.h"

namespace gpucache {
namespace {

// `base` with the keys a reload may change taken from `fresh`.
Config WithReloadable(const Config& base, const Config& fresh) {
  Config c = base;
  c.tenants = fresh.tenants;
  c.admin_uids = fresh.admin_uids;
  c.admin_gids = fresh.admin_gids;
  c.limits = fresh.limits;
  return c;
}

// The key lines of an effective configuration, each named with its table ("cold.max_bytes =
// 5000000", not "max_bytes = 5000000", which four tables could hold).
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string table;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      table = line.substr(1, line.size() - 2) + ".";
      continue;
    }
    out.push_back(table + line);
  }
  return out;
}

bool SameMembership(const std::vector<TenantConfig>& a, const std::vector<TenantConfig>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].uids != b[i].uids || a[i].gids != b[i].gids) return false;
  }
  return true;
}

}  // namespace

std::string Filesystem::CheckReload(const Config& fresh) const {
  // With kernel permission checks, membership lives in mode bits the kernel caches for
  // entry_timeout: a reload could not take a removed member's access away at once.
  if (config_.KernelPermissions()) {
    std::shared_ptr<const Config> now = effective_.load();
    if (!SameMembership(now->tenants, fresh.tenants) || now->admin_uids != fresh.admin_uids ||
        now->admin_gids != fresh.admin_gids) {
      return "tenants and admins cannot change live with fuse.permissions = \"kernel\" (the "
             "kernel caches tenant ownership): restart the daemon to change them";
    }
  }
  return "";
}

std::vector<std::string> Filesystem::Reload(const Config& fresh) {
  auto next = std::make_shared<const Config>(WithReloadable(config_, fresh));
  // Limits first: a tenant that becomes usable is never admitted under the old limits' absence.
  store_.SetLimits(ResourceLimitsOf(*next));
  access_.Replace(*next);
  effective_.store(next);
  // Every other key keeps its start-up value; name the lines that differ.
  std::vector<std::string> kept = Lines(EffectiveConfigText(*next));
  std::vector<std::string> ignored;
  for (const std::string& line : Lines(EffectiveConfigText(fresh))) {
    if (std::find(kept.begin(), kept.end(), line) == kept.end()) ignored.push_back(line);
  }
  return ignored;
}

}  // namespace gpucache
