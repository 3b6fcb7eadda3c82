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
  CHECK(p.MayUseTenant(Caller{1000, 1000}, "acme"));
  CHECK(p.MayUseTenant(Caller{4242, 3000}, "acme"));
  Caller supplementary{4242, 4242, [] { return std::vector<uint32_t>{17, 3000}; }};
  CHECK(p.MayUseTenant(supplementary, "acme"));
  CHECK_FALSE(p.MayUseTenant(supplementary, "globex"));
  CHECK_FALSE(p.MayUseTenant(Caller{1000, 1000}, "globex"));
  CHECK_FALSE(p.MayUseTenant(Caller{2000, 2000}, "acme"));
  CHECK_FALSE(p.MayUseTenant(Caller{1000, 1000}, "nosuch"));
}

TEST_CASE("Access: admins use every tenant, others are not admins") {
  AccessPolicy p(TwoTenants());
  CHECK(p.IsAdmin(Caller{0, 0}));
  CHECK(p.IsAdmin(Caller{5, 990}));
  CHECK_FALSE(p.IsAdmin(Caller{1000, 3000}));
  CHECK(p.MayUseTenant(Caller{0, 0}, "globex"));
  CHECK_FALSE(p.MayUseTenant(Caller{0, 0}, "nosuch"));
}

TEST_CASE("Access: supplementary groups are fetched only when needed") {
  AccessPolicy p(TwoTenants());
  int fetched = 0;
  Caller c{1000, 1000, [&] {
             ++fetched;
             return std::vector<uint32_t>{};
           }};
  CHECK(p.MayUseTenant(c, "acme"));
  CHECK(fetched == 0);
}

}  // namespace
}  // namespace gpucache
