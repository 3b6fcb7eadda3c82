#include "store/lifecycle.h"

#include <doctest/doctest.h>

#include <set>
#include <utility>

namespace gpucache {
namespace {

using S = BlockState;

TEST_CASE("Lifecycle: exactly the edges of the design are allowed") {
  const std::set<std::pair<S, S>> allowed = {
      {S::kAbsent, S::kReserved},      {S::kReserved, S::kWriting},
      {S::kReserved, S::kAbsent},      {S::kWriting, S::kCommitted},
      {S::kWriting, S::kAbsent},       {S::kWriting, S::kQuarantined},
      {S::kCommitted, S::kEvicting},   {S::kEvicting, S::kAbsent},
      {S::kEvicting, S::kQuarantined}, {S::kQuarantined, S::kAbsent},
  };
  for (S from : kAllBlockStates) {
    for (S to : kAllBlockStates) {
      CAPTURE(ToString(from));
      CAPTURE(ToString(to));
      CHECK(CanTransition(from, to) == (allowed.count({from, to}) == 1));
    }
  }
}

TEST_CASE("Lifecycle: committed block is never written again") {
  CHECK_FALSE(CanTransition(S::kCommitted, S::kWriting));
  CHECK_FALSE(CanTransition(S::kCommitted, S::kReserved));
  CHECK_FALSE(CanTransition(S::kQuarantined, S::kCommitted));
}

TEST_CASE("Lifecycle: Transition takes a legal edge and refuses an illegal one") {
  uint64_t refused = RefusedTransitions();
  S state = S::kCommitted;
  CHECK(Transition(state, S::kEvicting));
  CHECK(state == S::kEvicting);
  CHECK(RefusedTransitions() == refused);
  // Back to COMMITTED from EVICTING is not an edge: the state stays, the refusal is counted.
  CHECK_FALSE(Transition(state, S::kCommitted));
  CHECK(state == S::kEvicting);
  CHECK(RefusedTransitions() == refused + 1);
  S absent = S::kAbsent;
  CHECK_FALSE(Transition(absent, S::kCommitted));  // never published without a write
  CHECK(absent == S::kAbsent);
  CHECK(RefusedTransitions() == refused + 2);
}

TEST_CASE("Lifecycle: every state has a name") {
  std::set<std::string_view> names;
  for (S s : kAllBlockStates) names.insert(ToString(s));
  CHECK(names.size() == std::size(kAllBlockStates));
  CHECK(names.count("UNKNOWN") == 0);
}

}  // namespace
}  // namespace gpucache
