// PINS' format (store/pins_file.h): what a start reads from each data directory's copy.
#include "store/pins_file.h"

#include <doctest/doctest.h>

namespace gpucache {
namespace {

PinnedBlock At(const std::string& block, uint64_t commit) {
  return {BlockAddress{"acme", "ns", block}, commit, nullptr};
}

std::string Encode(const std::vector<PinnedBlock>& pins) {
  std::vector<const PinnedBlock*> all;
  for (const PinnedBlock& p : pins) all.push_back(&p);
  return PinsFile::Encode(all);
}

TEST_CASE("PinsFile: a pin applies to the commit it was made on, not to a later one at its path") {
  PinsFile f = PinsFile::Decode(Encode({At("b1", 100), At("b2", 200)}));
  CHECK(f.Pinned("acme/ns/b1", 100));
  CHECK_FALSE(f.Pinned("acme/ns/b1", 101));
  CHECK(f.Pinned("acme/ns/b2", 200));
  CHECK_FALSE(f.Pinned("acme/ns/b3", 100));
}

TEST_CASE("PinsFile: the directories' pins are merged") {
  PinsFile f = PinsFile::Decode(Encode({At("in_a", 1)}));
  f.Merge(PinsFile::Decode(Encode({At("in_b", 2)})));
  CHECK(f.Pinned("acme/ns/in_a", 1));
  CHECK(f.Pinned("acme/ns/in_b", 2));
  f.Merge(PinsFile::Decode(Encode({})));
  CHECK(f.Pinned("acme/ns/in_a", 1));
}

TEST_CASE("PinsFile: the first format (paths alone) pins whatever is at each path") {
  PinsFile f = PinsFile::Decode("acme/ns/b1\n\nacme/ns/b2");
  CHECK(f.Pinned("acme/ns/b1", 5));
  CHECK(f.Pinned("acme/ns/b2", 6));
  CHECK_FALSE(f.Pinned("acme/ns/b3", 6));
}

TEST_CASE("PinsFile: damage costs pins, never more") {
  PinsFile f = PinsFile::Decode("gpucache-pins 2\nacme/ns/b1\nacme/ns/b2 12x\nacme/ns/b3 13\nacme/ns/b4 0\n");
  CHECK_FALSE(f.Pinned("acme/ns/b1", 0));  // no commit: skipped, not a pin of any commit
  CHECK_FALSE(f.Pinned("acme/ns/b1", 1));
  CHECK_FALSE(f.Pinned("acme/ns/b2", 12));
  CHECK(f.Pinned("acme/ns/b3", 13));
  CHECK_FALSE(f.Pinned("acme/ns/b4", 7));  // commit 0 would pin any commit: skipped
  CHECK(PinsFile::Decode("").empty());
}

}  // namespace
}  // namespace gpucache
