#include "store/pins_file.h"

#include <charconv>
#include <utility>

namespace gpucache {
namespace {

constexpr std::string_view kHeader = "gpucache-pins 2 ";

bool ParseU64(std::string_view s, uint64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

}  // namespace

std::string PinsFile::Encode(uint64_t generation, const std::vector<PinnedBlock>& pinned) {
  std::string text(kHeader);
  text += std::to_string(generation) + "\n";
  for (const PinnedBlock& p : pinned) {
    text += p.address.RelativePath() + " " + std::to_string(p.commit_time_ns) + "\n";
  }
  return text;
}

PinsFile PinsFile::Decode(std::string_view text) {
  PinsFile f;
  bool versioned = text.starts_with(kHeader);
  bool first = true;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (std::exchange(first, false) && versioned) {
      if (!ParseU64(line.substr(kHeader.size()), f.generation_)) return PinsFile{};
      continue;
    }
    if (line.empty()) continue;
    if (!versioned) {
      f.pins_.emplace(std::string(line), kAnyCommit);
      continue;
    }
    size_t space = line.rfind(' ');
    uint64_t commit = 0;
    if (space == std::string_view::npos || !ParseU64(line.substr(space + 1), commit)) continue;
    f.pins_.emplace(std::string(line.substr(0, space)), commit);
  }
  return f;
}

void PinsFile::TakeNewer(PinsFile other) {
  if (other.generation_ < generation_) return;
  if (other.generation_ > generation_) {
    *this = std::move(other);
    return;
  }
  pins_.merge(other.pins_);
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
