#include "fs/access.h"

#include <doctest/doctest.h>

namespace gpucache {
namespace {

Config TwoTenants() {
  return ParseConfig(R"(
[admins]
uids = [0]
gids = [990]
[tenants.acme]
uids = [1000]
gids = [3000]
[tenants.globex]
uids = [2000]
)",
                     "t.toml");
}

TEST_CASE("Access: members by uid, primary gid or supplementary group") {
  AccessPolicy p(TwoTenants());
  CHECK(p.MayUseTenant(Principal{1000, 1000}, "acme"));
  CHECK(p.MayUseTenant(Principal{4242, 3000}, "acme"));
  Principal supplementary{4242, 4242, [] { return std::vector<uint32_t>{17, 3000}; }};
  CHECK(p.MayUseTenant(supplementary, "acme"));
  CHECK_FALSE(p.MayUseTenant(supplementary, "globex"));
  CHECK_FALSE(p.MayUseTenant(Principal{1000, 1000}, "globex"));
  CHECK_FALSE(p.MayUseTenant(Principal{2000, 2000}, "acme"));
  CHECK_FALSE(p.MayUseTenant(Principal{1000, 1000}, "nosuch"));
}

TEST_CASE("Access: admins use every tenant, others are not admins") {
  AccessPolicy p(TwoTenants());
  CHECK(p.IsAdmin(Principal{0, 0}));
  CHECK(p.IsAdmin(Principal{5, 990}));
  CHECK_FALSE(p.IsAdmin(Principal{1000, 3000}));
  CHECK(p.MayUseTenant(Principal{0, 0}, "globex"));
  CHECK_FALSE(p.MayUseTenant(Principal{0, 0}, "nosuch"));
}

TEST_CASE("Access: supplementary groups are fetched only when needed") {
  AccessPolicy p(TwoTenants());
  int fetched = 0;
  Principal c{1000, 1000, [&] {
             ++fetched;
             return std::vector<uint32_t>{};
           }};
  CHECK(p.MayUseTenant(c, "acme"));
  CHECK(fetched == 0);
}

// What a control extension (the cold tier) authorizes by: the principal as fs/ established it.
TEST_CASE("Access: an established principal carries its admin flag and tenants, not the groups reader") {
  AccessPolicy p(TwoTenants());
  Principal by_group = p.Establish({4242, 4242, [] { return std::vector<uint32_t>{3000}; }});
  CHECK(by_group.uid == 4242);
  CHECK_FALSE(by_group.admin);
  CHECK(by_group.tenants == std::set<std::string>{"acme"});
  CHECK(by_group.MayActFor("acme"));
  CHECK_FALSE(by_group.MayActFor("globex"));
  CHECK_FALSE(by_group.supplementary_groups);  // it reads the FUSE request, gone after the reply
  Principal admin = p.Establish({5, 990});
  CHECK(admin.admin);
  CHECK(admin.tenants == std::set<std::string>{"acme", "globex"});
  CHECK(admin.MayActFor("anything"));
  Principal stranger = p.Establish({7, 7});
  CHECK_FALSE(stranger.admin);
  CHECK(stranger.tenants.empty());
  CHECK_FALSE(stranger.MayActFor("acme"));
}

}  // namespace
}  // namespace gpucache
