// Text someone else wrote (a caller's request, an S3 endpoint's error message) made safe to
// print on a terminal or in a log line: such text may carry newlines that forge a line of
// output, or escape sequences the terminal obeys. The S3 XML parser rightly decodes &#10; and
// &#13; (cold/s3_xml.cc), so it is the printing, not the parsing, that escapes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gpucache {

// At most `max` bytes of `s`, printable ASCII kept as is and every other byte (control
// characters, DEL, bytes of non-ASCII UTF-8) written as \xHH; a backslash is written \\ so an
// escape in the output always means a byte of the input. The result is one line.
inline std::string Printable(std::string_view s, size_t max = 64) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s.substr(0, max)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
    }
  }
  return out;
}

}  // namespace gpucache
