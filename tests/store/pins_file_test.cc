// PINS' format (store/pins_file.h): what a start reads from each data directory's copy.
#include "store/pins_file.h"

#include <doctest/doctest.h>

namespace gpucache {
namespace {

PinnedBlock At(const std::string& block, uint64_t commit) {
  return {BlockAddress{"acme", "ns", block}, commit};
}

TEST_CASE("PinsFile: a pin applies to the commit it was made on, not to a later one at its path") {
  PinsFile f = PinsFile::Decode(PinsFile::Encode(7, {At("b1", 100), At("b2", 200)}));
  CHECK(f.generation() == 7);
  CHECK(f.Pinned("acme/ns/b1", 100));
  CHECK_FALSE(f.Pinned("acme/ns/b1", 101));
  CHECK(f.Pinned("acme/ns/b2", 200));
  CHECK_FALSE(f.Pinned("acme/ns/b3", 100));
}

TEST_CASE("PinsFile: of two copies the newer generation wins, and equal ones are merged") {
  PinsFile f = PinsFile::Decode(PinsFile::Encode(3, {At("old", 1)}));
  f.TakeNewer(PinsFile::Decode(PinsFile::Encode(4, {At("new", 2)})));
  CHECK(f.generation() == 4);
  CHECK_FALSE(f.Pinned("acme/ns/old", 1));
  CHECK(f.Pinned("acme/ns/new", 2));
  f.TakeNewer(PinsFile::Decode(PinsFile::Encode(3, {At("stale", 3)})));
  CHECK_FALSE(f.Pinned("acme/ns/stale", 3));
  f.TakeNewer(PinsFile::Decode(PinsFile::Encode(4, {At("same", 4)})));
  CHECK(f.Pinned("acme/ns/new", 2));
  CHECK(f.Pinned("acme/ns/same", 4));
}

TEST_CASE("PinsFile: the first format (paths alone) pins whatever is at each path") {
  PinsFile f = PinsFile::Decode("acme/ns/b1\n\nacme/ns/b2");
  CHECK(f.generation() == 0);
  CHECK(f.Pinned("acme/ns/b1", 5));
  CHECK(f.Pinned("acme/ns/b2", 6));
  // Any copy in the new format is newer.
  f.TakeNewer(PinsFile::Decode(PinsFile::Encode(1, {})));
  CHECK(f.empty());
}

TEST_CASE("PinsFile: damage costs pins, never more") {
  CHECK(PinsFile::Decode("gpucache-pins 2 x\nacme/ns/b1 1\n").empty());  // no generation
  PinsFile f = PinsFile::Decode("gpucache-pins 2 9\nacme/ns/b1\nacme/ns/b2 12x\nacme/ns/b3 13\n");
  CHECK(f.generation() == 9);
  CHECK_FALSE(f.Pinned("acme/ns/b1", 0));  // no commit: skipped
  CHECK_FALSE(f.Pinned("acme/ns/b2", 12));
  CHECK(f.Pinned("acme/ns/b3", 13));
}

}  // namespace
}  // namespace gpucache
