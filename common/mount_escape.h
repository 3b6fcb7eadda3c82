// The octal escapes the kernel writes in /proc/self/mountinfo and /proc/self/mounts, and fstab
// uses: a space, tab, newline or backslash in a path is written \040, \011, \012, \134.
// One decoder for the daemon's mount checks (store/data_dir_claim.cc, fs/fuse_connection.cc) and
// gpucachectl's discovery (ctl/discover.cc).
#pragma once

#include <string>
#include <string_view>

namespace gpucache {

// `field` with every backslash followed by three octal digits replaced by the byte they name.
inline std::string UnescapeMountField(std::string_view field) {
  auto octal = [&](size_t k) { return k < field.size() && field[k] >= '0' && field[k] <= '7'; };
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

}  // namespace gpucache
