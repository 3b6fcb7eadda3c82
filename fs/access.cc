#include "fs/access.h"

#include <algorithm>

namespace gpucache {

AccessPolicy::AccessPolicy(const Config& config)
    : tenants_(config.tenants), admin_uids_(config.admin_uids), admin_gids_(config.admin_gids) {}

bool AccessPolicy::Matches(const Caller& caller, const std::vector<uint32_t>& uids,
                           const std::vector<uint32_t>& gids) {
  auto has = [](const std::vector<uint32_t>& v, uint32_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  if (has(uids, caller.uid) || has(gids, caller.gid)) return true;
  if (gids.empty() || !caller.supplementary_groups) return false;
  for (uint32_t g : caller.supplementary_groups()) {
    if (has(gids, g)) return true;
  }
  return false;
}

bool AccessPolicy::IsAdmin(const Caller& caller) const {
  return Matches(caller, admin_uids_, admin_gids_);
}

bool AccessPolicy::IsTenant(std::string_view tenant) const {
  return std::any_of(tenants_.begin(), tenants_.end(),
                     [&](const TenantConfig& t) { return t.name == tenant; });
}

bool AccessPolicy::MayUseTenant(const Caller& caller, std::string_view tenant) const {
  for (const TenantConfig& t : tenants_) {
    if (t.name == tenant) return Matches(caller, t.uids, t.gids) || IsAdmin(caller);
  }
  return false;
}

}  // namespace gpucache
