// CallerSlots (fs/caller_slots.h): the daemon threads control requests of members may hold.
#include "fs/caller_slots.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

namespace gpucache {
namespace {

TEST_CASE("CallerSlots: a cap per uid, and one for all uids together") {
  CallerSlots slots(/*per_caller=*/2, /*in_all=*/4);
  CHECK(slots.TryTake(1000));
  CHECK(slots.TryTake(1000));
  CHECK_FALSE(slots.TryTake(1000));  // its own cap
  CHECK(slots.TryTake(1001));
  CHECK(slots.TryTake(1002));
  // Regression (review, 2026-12-06): five uids within their own caps took all ten FUSE threads
  // between them (slow cold packs queued on one lock); the fifth slot is refused now.
  CHECK_FALSE(slots.TryTake(1003));
  CHECK_FALSE(slots.TryTake(1004));
  slots.Give(1000);
  CHECK(slots.TryTake(1003));  // a slot given back is free for anyone
  CHECK_FALSE(slots.TryTake(1000));
  slots.Give(1234);  // a uid holding none: nothing changes
  CHECK_FALSE(slots.TryTake(1005));
}

TEST_CASE("CallerSlots: a cap per tenant, whatever the number of its uids") {
  CallerSlots slots(/*per_caller=*/2, /*in_all=*/8, /*per_tenant=*/3);
  const std::set<std::string> acme{"acme"}, both{"acme", "globex"}, globex{"globex"};
  CHECK(slots.TryTake(1000, acme));
  CHECK(slots.TryTake(1001, acme));
  CHECK(slots.TryTake(1002, acme));
  CHECK_FALSE(slots.TryTake(1003, acme));  // acme's cap, though 1003 holds none
  CHECK_FALSE(slots.TryTake(1004, both));  // a member of acme too
  CHECK(slots.TryTake(2000, globex));
  slots.Give(1000, acme);
  CHECK(slots.TryTake(1004, both));
  CHECK(slots.TryTake(2001, globex));
  CHECK_FALSE(slots.TryTake(2002, globex));  // globex: 2000, 2001 and 1004
}

}  // namespace
}  // namespace gpucache
