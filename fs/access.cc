#include "fs/access.h"

#include <algorithm>

namespace gpucache {

AccessPolicy::AccessPolicy(const Config& config) : rules_(RulesOf(config)) {}

std::shared_ptr<const AccessPolicy::Rules> AccessPolicy::RulesOf(const Config& config) {
  auto r = std::make_shared<Rules>();
  r->tenants = config.tenants;
  std::sort(r->tenants.begin(), r->tenants.end(),
            [](const TenantConfig& a, const TenantConfig& b) { return a.name < b.name; });
  r->admin_uids = config.admin_uids;
  r->admin_gids = config.admin_gids;
  r->uses_groups = !r->admin_gids.empty() ||
                   std::any_of(r->tenants.begin(), r->tenants.end(), [](const TenantConfig& t) { return !t.gids.empty(); });
  return r;
}

void AccessPolicy::Replace(const Config& config) {
  rules_.store(RulesOf(config), std::memory_order_release);
}

bool AccessPolicy::Matches(const Principal& caller, const std::vector<uint32_t>& uids,
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

bool AccessPolicy::UsesGroups() const { return rules()->uses_groups; }

bool AccessPolicy::IsAdmin(const Rules& r, const Principal& caller) {
  return Matches(caller, r.admin_uids, r.admin_gids);
}

bool AccessPolicy::IsAdmin(const Principal& caller) const { return IsAdmin(*rules(), caller); }

bool AccessPolicy::IsTenant(std::string_view tenant) const {
  auto r = rules();
  return std::any_of(r->tenants.begin(), r->tenants.end(),
                     [&](const TenantConfig& t) { return t.name == tenant; });
}

std::vector<TenantConfig> AccessPolicy::tenants() const { return rules()->tenants; }

std::optional<TenantConfig> AccessPolicy::Tenant(std::string_view name) const {
  auto r = rules();
  for (const TenantConfig& t : r->tenants) {
    if (t.name == name) return t;
  }
  return std::nullopt;
}

Principal AccessPolicy::Establish(const Principal& caller) const {
  auto r = rules();
  Principal p{caller.uid, caller.gid, nullptr, IsAdmin(*r, caller), {}};
  for (const TenantConfig& t : r->tenants) {
    if (p.admin || Matches(caller, t.uids, t.gids)) p.tenants.insert(t.name);
  }
  return p;
}

bool AccessPolicy::MayUseTenant(const Principal& caller, std::string_view tenant) const {
  auto r = rules();  // one snapshot for the whole decision
  for (const TenantConfig& t : r->tenants) {
    if (t.name == tenant) return Matches(caller, t.uids, t.gids) || IsAdmin(*r, caller);
  }
  return false;
}

}  // namespace gpucache
