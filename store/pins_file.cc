#include "store/pins_file.h"

#include <charconv>

namespace gpucache {
namespace {

constexpr std::string_view kHeader = "gpucache-pins 2";

bool ParseU64(std::string_view s, uint64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// The next line of `text` (without its newline), which it leaves.
std::string_view TakeLine(std::string_view& text) {
  size_t end = text.find('\n');
  std::string_view line = text.substr(0, end);
  text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  return line;
}

}  // namespace

std::string PinsFile::Encode(const std::vector<const PinnedBlock*>& pinned) {
  std::string text(kHeader);
  text += "\n";
  for (const PinnedBlock* p : pinned) {
    text += p->address.RelativePath() + " " + std::to_string(p->commit_time_ns) + "\n";
  }
  return text;
}

PinsFile PinsFile::Decode(std::string_view text) {
  PinsFile f;
  std::string_view rest = text;
  const bool versioned = TakeLine(rest) == kHeader;
  if (!versioned) rest = text;
  while (!rest.empty()) {
    std::string_view line = TakeLine(rest);
    if (line.empty()) continue;
    if (!versioned) {
      f.pins_.emplace(std::string(line), kAnyCommit);
      continue;
    }
    size_t space = line.rfind(' ');
    uint64_t commit = 0;
    if (space == std::string_view::npos || !ParseU64(line.substr(space + 1), commit)) continue;
    if (commit == kAnyCommit) continue;  // no commit is at time 0: damage
    f.pins_.emplace(std::string(line.substr(0, space)), commit);
  }
  return f;
}

bool PinsFile::Pinned(const std::string& relative, uint64_t commit_time_ns) const {
  if (pins_.empty()) return false;
  auto [first, last] = pins_.equal_range(relative);
  for (auto it = first; it != last; ++it) {
    if (it->second == kAnyCommit || it->second == commit_time_ns) return true;
  }
  return false;
}

}  // namespace gpucache
