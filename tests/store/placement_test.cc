#include "store/placement.h"
#include "store/device_set.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace gpucache {
namespace {

std::vector<size_t> Counts(const std::vector<PlacementCandidate>& c, int keys) {
  std::vector<size_t> n(c.size());
  for (int k = 0; k < keys; ++k) n[PickPlacement("acme/ns/" + std::to_string(k), c).value()]++;
  return n;
}

TEST_CASE("Placement: shares follow the weights") {
  const int keys = 40000;
  std::vector<size_t> n = Counts({{0, 1}, {1, 3}}, keys);
  CHECK(n[0] == doctest::Approx(keys * 0.25).epsilon(0.05));
  CHECK(n[1] == doctest::Approx(keys * 0.75).epsilon(0.05));
  // Equal weights split evenly, whatever their scale.
  n = Counts({{0, 5e12}, {1, 5e12}, {2, 5e12}}, keys);
  for (size_t x : n) CHECK(x == doctest::Approx(keys / 3.0).epsilon(0.05));
}

TEST_CASE("Placement: a full directory takes nothing unless all are full") {
  std::vector<size_t> n = Counts({{0, 0}, {1, 2}, {2, 1}}, 3000);
  CHECK(n[0] == 0);
  CHECK(n[1] > n[2]);
  n = Counts({{0, 0}, {1, 0}}, 3000);
  CHECK(n[0] > 1000);
  CHECK(n[1] > 1000);
}

TEST_CASE("Placement: taking a directory out of service moves only its keys") {
  std::vector<PlacementCandidate> c = {{0, 1}, {1, 2}, {2, 1}};
  std::vector<PlacementCandidate> without = c;
  without[1].in_service = false;
  for (int k = 0; k < 5000; ++k) {
    std::string key = "t/n/" + std::to_string(k);
    size_t before = PickPlacement(key, c).value(), after = PickPlacement(key, without).value();
    if (before != 1) CHECK(after == before);
    CHECK(after != 1);
  }
  for (auto& x : c) x.in_service = false;
  CHECK_FALSE(PickPlacement("k", c).has_value());
  CHECK_FALSE(PickPlacement("k", {}).has_value());
}

TEST_CASE("Placement: the same key and weights always pick the same directory") {
  std::vector<PlacementCandidate> c = {{0, 10}, {1, 20}, {2, 30}};
  for (int k = 0; k < 100; ++k) {
    std::string key = "x/" + std::to_string(k);
    CHECK(PickPlacement(key, c) == PickPlacement(key, c));
  }
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

TEST_CASE("DeviceSet: isolation takes a directory out of service once, never the last one") {
  std::vector<DeviceSet::Device> devices;
  for (const char* root : {"/nonexistent/d0", "/nonexistent/d1"}) devices.push_back({DataDir(root), Fd(), false});
  DeviceSet set(Env::Posix(), std::move(devices));
  size_t dev = 99;
  bool newly = true;
  CHECK(set.Isolate("/nonexistent/other", dev, newly) == StatusCode::kNotFound);
  CHECK_FALSE(newly);
  REQUIRE(set.Isolate("/nonexistent/d1", dev, newly) == StatusCode::kOk);
  CHECK(dev == 1);
  CHECK(newly);
  CHECK(set.Isolated(1));
  CHECK(set.Isolate("/nonexistent/d1", dev, newly) == StatusCode::kOk);  // already out
  CHECK_FALSE(newly);
  CHECK(set.Isolate("/nonexistent/d0", dev, newly) == StatusCode::kInvalidArgument);
  CHECK_FALSE(set.Isolated(0));
  // Every new block goes to the one left in service, whatever its address.
  for (int i = 0; i < 20; ++i) {
    CHECK(set.PlaceFor(BlockAddress{"acme", "ns", std::to_string(i)}) == 0);
  }
  CHECK(set.Domains().size() == 2);
  CHECK(set.Domains()[1].isolated);
}

}  // namespace
}  // namespace gpucache
