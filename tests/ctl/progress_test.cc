// gpucachectl's progress reporting (ctl/progress.h): silent for short work and, when asked,
// off a terminal; a bar on a terminal, lines in a log otherwise.
#include "ctl/progress.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

namespace gpucache::ctl {
namespace {

// Runs `steps` steps with `o` (its output captured) and returns what was written.
std::string Run(ProgressOptions o, int steps) {
  std::FILE* f = std::tmpfile();
  o.out = f;
  {
    Progress p("scanning", static_cast<uint64_t>(steps), o);
    for (int i = 0; i < steps; ++i) p.Step();
  }
  std::string text(4096, '\0');
  std::rewind(f);
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  return text;
}

TEST_CASE("Progress: nothing at all while the work is shorter than the delay") {
  ProgressOptions o;
  o.delay = std::chrono::hours(1);
  o.tty = true;
  CHECK(Run(o, 10).empty());
  o.tty = false;
  CHECK(Run(o, 10).empty());
}

TEST_CASE("Progress: terminal_only prints nothing into a file or pipe, however long it takes") {
  ProgressOptions o;
  o.delay = std::chrono::milliseconds(0);
  o.terminal_only = true;
  o.tty = false;
  CHECK(Run(o, 10).empty());
  o.tty = true;
  std::string bar = Run(o, 10);
  CHECK(bar.find("\rscanning [") != std::string::npos);
  CHECK(bar.find("10/10") != std::string::npos);
  CHECK(bar.back() == '\n');
}

TEST_CASE("Progress: long work into a log gives one line per tenth") {
  ProgressOptions o;
  o.delay = std::chrono::milliseconds(0);
  o.tty = false;
  std::string lines = Run(o, 20);
  CHECK(lines.find("scanning: 2/20\n") != std::string::npos);
  CHECK(lines.find("scanning: 20/20\n") != std::string::npos);
  CHECK(lines.find('\r') == std::string::npos);
  size_t n = 0;
  for (char c : lines) n += c == '\n';
  CHECK(n == 10);
}

}  // namespace
}  // namespace gpucache::ctl
