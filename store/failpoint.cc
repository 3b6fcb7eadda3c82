#include "store/failpoint.h"

#include <stdlib.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "store/mutex.h"

namespace gpucache::failpoint {
namespace {

struct Point {
  std::string name;
  uint64_t fire_at = 1;  // the pass that fires (1-based)
  uint64_t passes = 0;
};

struct Registry {
  explicit Registry(std::vector<Point> parsed) : points(std::move(parsed)) {}
  Mutex mu;
  std::vector<Point> points GUARDED_BY(mu);  // (a handful at most, searched linearly)
};

// "a,b@3" -> {a@1, b@3}. Malformed counts fall back to 1: a test that misspells one still
// crashes somewhere visible rather than silently never.
std::vector<Point> Parse(const char* spec) {
  std::vector<Point> out;
  std::string_view rest = spec ? spec : "";
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    Point p;
    size_t at = item.find('@');
    p.name = std::string(item.substr(0, at));
    if (at != std::string_view::npos) {
      std::string_view n = item.substr(at + 1);
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
      if (ec == std::errc() && end == n.data() + n.size() && v > 0) p.fire_at = v;
    }
    out.push_back(std::move(p));
  }
  return out;
}

Registry& TheRegistry() {
  static Registry* r = [] {
    // Never destroyed: failpoints may be reached during exit.
    return new Registry(Parse(::getenv("GPUCACHE_FAILPOINTS")));
  }();
  return *r;
}

}  // namespace

namespace detail {
bool ParseEnvironment() {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  return !r.points.empty();
}
}  // namespace detail

bool Hit(std::string_view name) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  for (Point& p : r.points) {
    if (p.name == name && ++p.passes == p.fire_at) return true;
  }
  return false;
}

void Crash(std::string_view name) {
  std::string line = "gpucache: failpoint " + std::string(name) + " fired\n";
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
  ::_exit(kFailpointExitCode);
}

}  // namespace gpucache::failpoint
