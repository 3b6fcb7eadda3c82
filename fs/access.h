// Who may do what: tenant membership and admin rights, decided from the caller's uid and
// groups as the kernel reports them for each request. Nothing else (no paths, no xattrs, no
// request fields) can widen what a caller may reach.
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/config.h"

namespace gpucache {

struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Supplementary groups, fetched only when uid and primary gid did not decide (it costs a read
  // of /proc). May be empty.
  std::function<std::vector<uint32_t>()> supplementary_groups;
};

class AccessPolicy {
 public:
  explicit AccessPolicy(const Config& config);

  bool IsAdmin(const Caller& caller) const;
  // Member of `tenant`, or an admin. False for tenants that are not configured.
  bool MayUseTenant(const Caller& caller, std::string_view tenant) const;
  bool IsTenant(std::string_view tenant) const;
  const std::vector<TenantConfig>& tenants() const { return tenants_; }

 private:
  static bool Matches(const Caller& caller, const std::vector<uint32_t>& uids,
                      const std::vector<uint32_t>& gids);
  std::vector<TenantConfig> tenants_;
  std::vector<uint32_t> admin_uids_, admin_gids_;
};

}  // namespace gpucache
