// CallerSlots (fs/caller_slots.h): the daemon threads control requests of members may hold.
#include "fs/caller_slots.h"

#include <doctest/doctest.h>

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

}  // namespace
}  // namespace gpucache
