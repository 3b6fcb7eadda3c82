// Failpoints: named places in the commit path where a test can make the process die, to check
// crash consistency through a real mount (tests/reliability/crash_test.cc).
//
//   GPUCACHE_FAILPOINTS="name[@N][,name[@N]...]"
//
// is read from the environment once, at the first failpoint reached. The Nth time (default: the
// first) control passes GPUCACHE_FAILPOINT(name), the process writes one line to stderr
// ("gpucache: failpoint NAME fired") and dies with _exit(kFailpointExitCode): no destructors, no
// flushing, nothing but what the kernel already holds, as with a crash. The names in use are
// listed in docs/reliability.md.
//
// Unset (production), a failpoint costs an inlined check of an initialised function-local static
// and a predictable branch. Only tests set the variable.
//
// Thread safety: safe to reach from any thread; hit counts are shared by all threads.
#pragma once

#include <string_view>

namespace gpucache::failpoint {

inline constexpr int kFailpointExitCode = 86;

namespace detail {
bool ParseEnvironment();  // reads GPUCACHE_FAILPOINTS; true if it names anything
}  // namespace detail

// True if GPUCACHE_FAILPOINTS named anything (read once, at the first call).
inline bool Armed() {
  static const bool armed = detail::ParseEnvironment();
  return armed;
}
// Counts one pass through `name`; true when this pass is the one that should fire.
bool Hit(std::string_view name);
// Announces `name` on stderr and ends the process at once.
[[noreturn]] void Crash(std::string_view name);

}  // namespace gpucache::failpoint

#define GPUCACHE_FAILPOINT(name)                                              \
  do {                                                                        \
    if (::gpucache::failpoint::Armed() && ::gpucache::failpoint::Hit(name)) { \
      ::gpucache::failpoint::Crash(name);                                     \
    }                                                                         \
  } while (0)

// For failpoints that must do something first (a torn write): true when `name` fires now; the
// caller then does its partial work and calls Crash(name).
#define GPUCACHE_FAILPOINT_FIRES(name) \
  (::gpucache::failpoint::Armed() && ::gpucache::failpoint::Hit(name))
