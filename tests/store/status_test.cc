#include "store/status.h"

#include <doctest/doctest.h>

#include <set>

namespace gpucache {
namespace {

TEST_CASE("Status: every code has a distinct name") {
  std::set<std::string_view> names;
  for (StatusCode c : kAllStatusCodes) names.insert(ToString(c));
  CHECK(names.size() == std::size(kAllStatusCodes));
  CHECK(names.count("unknown") == 0);
  // kAllStatusCodes lists every enumerator: the last one is the highest value.
  CHECK(static_cast<size_t>(kAllStatusCodes[std::size(kAllStatusCodes) - 1]) + 1 ==
        std::size(kAllStatusCodes));
}

TEST_CASE("Status: Result carries a value or a code") {
  Result<int> ok = 3;
  Result<int> miss = StatusCode::kNotFound;
  CHECK(ok.ok());
  CHECK(ok.value() == 3);
  CHECK(ok.status() == StatusCode::kOk);
  CHECK_FALSE(miss.ok());
  CHECK(miss.status() == StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpucache
