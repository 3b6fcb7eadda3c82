// Who may do what: tenant membership and admin rights, decided from the caller's uid and
// groups as the kernel reports them for each request. Nothing else (no paths, no xattrs, no
// request fields) can widen what a caller may reach.
//
// The rules (tenants with their uid/gid lists and limits, admins) are one immutable snapshot
// behind an atomically swapped shared_ptr: a live reload (SIGHUP, docs/configuration.md)
// replaces it whole, and every check reads one snapshot, so a request never sees half of an
// old and half of a new configuration. The daemon still checks every request (adr/0001).
//
// Thread safety: every method may be called concurrently, Replace included.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/principal.h"
#include "fs/config.h"

namespace gpucache {

class AccessPolicy {
 public:
  explicit AccessPolicy(const Config& config);

  bool IsAdmin(const Principal& caller) const;
  // Member of `tenant`, or an admin. False for tenants that are not configured.
  bool MayUseTenant(const Principal& caller, std::string_view tenant) const;
  // MayUseTenant, or an admin for a tenant that is not configured (any more): its blocks stay
  // on disk and in the index until evicted, and only an admin can see, unpin, evict or reclaim
  // them (review, 2026-12-07: its pins could not be undone).
  bool MayAdminister(const Principal& caller, std::string_view tenant) const {
    return IsAdmin(caller) || MayUseTenant(caller, tenant);
  }
  bool IsTenant(std::string_view tenant) const;
  // Whether any tenant or the admins are given by gid: only then can a caller's supplementary
  // groups change what it may do.
  bool UsesGroups() const;
  // `caller` established for a module that authorizes by it (common/principal.h): admin, and
  // every configured tenant it may use, from one snapshot of the rules; no groups reader.
  Principal Establish(const Principal& caller) const;
  // The configured tenants, sorted by name (a copy: a reload may replace them meanwhile).
  std::vector<TenantConfig> tenants() const;
  std::optional<TenantConfig> Tenant(std::string_view name) const;
  // Takes the tenants and admins of `config` from now on (a live reload).
  void Replace(const Config& config);

 private:
  struct Rules {
    std::vector<TenantConfig> tenants;
    std::vector<uint32_t> admin_uids, admin_gids;
    bool uses_groups = false;  // any gid above: decided once per configuration (RulesOf)
  };
  static std::shared_ptr<const Rules> RulesOf(const Config& config);
  static bool Matches(const Principal& caller, const std::vector<uint32_t>& uids,
                      const std::vector<uint32_t>& gids);
  static bool IsAdmin(const Rules& r, const Principal& caller);
  std::shared_ptr<const Rules> rules() const { return rules_.load(std::memory_order_acquire); }
  std::atomic<std::shared_ptr<const Rules>> rules_;
};

}  // namespace gpucache
