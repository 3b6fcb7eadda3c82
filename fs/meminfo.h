// One line of /proc/meminfo ("MemTotal:", "MemAvailable:") in bytes: the RAM tier's default size
// (fs/config.cc) and its promoter's check of the machine's free memory (fs/ram_promoter.cc).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

namespace gpucache {

// nullopt if /proc/meminfo cannot be read or has no such line.
inline std::optional<uint64_t> MemInfoBytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  for (std::string name, unit; in >> name;) {
    uint64_t kib = 0;
    if (!(in >> kib)) return std::nullopt;
    std::getline(in, unit);
    if (name == key) return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace gpucache
