// A block committed in one write: the frame written to `<mountpoint>/.gpucache/commit`
// (adr/0022, docs/control-protocol.md "commit"). One definition for the daemon (fs/), which
// parses frames, and the clients, which build them.
//
//   offset  size  field
//   0       4     magic "GPCF"
//   4       2     version, 1 (little-endian, as every field)
//   6       2     flags, 0 (reserved: a frame with any bit set is refused)
//   8       4     path length P, 1..kMaxFramePath: "<tenant>/<namespace>/<block>"
//   12      4     identity length I, 1..kMaxFrameIdentity (16 KiB): the canonical identity (GPCK), as the
//                 `user.gpucache.identity` xattr would carry it
//   16      8     payload length N
//   24      P     path
//   24+P    I     identity
//   24+P+I  N     payload
//
// Header-only; the standard library only.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpucache::commit_frame {

inline constexpr char kMagic[4] = {'G', 'P', 'C', 'F'};
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kFixedBytes = 24;
inline constexpr uint32_t kMaxFramePath = 1024;       // three names of at most NAME_MAX, with room
// A GPCK identity is a few hundred bytes; the store refuses more than 16 KiB
// (store/block_file.h, kMaxIdentityBytes: fs/filesystem_commit.cc checks the two agree).
inline constexpr uint32_t kMaxFrameIdentity = 16 * 1024;

struct Header {
  std::string path;                // "<tenant>/<namespace>/<block>", not yet checked
  std::vector<uint8_t> identity;   // canonical identity bytes, not yet checked
  uint64_t payload_bytes = 0;
  size_t header_bytes = 0;  // where the payload starts in the frame
};

namespace detail {
template <typename T>
T LoadLe(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}
template <typename T>
void StoreLe(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
}  // namespace detail

// Parses the whole header at the start of `bytes` (a frame's first write; the payload may follow).
// False for a header cut short, a wrong magic, version or flags, or a length out of bounds.
inline bool ParseHeader(std::span<const uint8_t> bytes, Header& out) {
  const uint8_t* p = bytes.data();
  if (bytes.size() < kFixedBytes || std::memcmp(p, kMagic, sizeof kMagic) != 0) return false;
  const uint16_t version = detail::LoadLe<uint16_t>(p + 4), flags = detail::LoadLe<uint16_t>(p + 6);
  const uint32_t path_len = detail::LoadLe<uint32_t>(p + 8), id_len = detail::LoadLe<uint32_t>(p + 12);
  if (version != kVersion || flags != 0) return false;
  if (path_len == 0 || path_len > kMaxFramePath || id_len == 0 || id_len > kMaxFrameIdentity) return false;
  const size_t header = kFixedBytes + path_len + id_len;
  if (bytes.size() < header) return false;
  out.path.assign(reinterpret_cast<const char*>(p + kFixedBytes), path_len);
  out.identity.assign(p + kFixedBytes + path_len, p + header);
  out.payload_bytes = detail::LoadLe<uint64_t>(p + 16);
  out.header_bytes = header;
  return true;
}

// The header of a frame for `path`, `identity` and a payload of `payload_bytes`; the payload
// follows it in the same write (pwritev with the payload as a second iovec copies nothing).
// REQUIRES: 1 <= path.size() <= kMaxFramePath, 1 <= identity.size() <= kMaxFrameIdentity.
inline std::vector<uint8_t> EncodeHeader(std::string_view path, std::span<const uint8_t> identity,
                                         uint64_t payload_bytes) {
  std::vector<uint8_t> out(kFixedBytes + path.size() + identity.size());
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, sizeof kMagic);
  detail::StoreLe<uint16_t>(p + 4, kVersion);
  detail::StoreLe<uint16_t>(p + 6, 0);
  detail::StoreLe<uint32_t>(p + 8, static_cast<uint32_t>(path.size()));
  detail::StoreLe<uint32_t>(p + 12, static_cast<uint32_t>(identity.size()));
  detail::StoreLe<uint64_t>(p + 16, payload_bytes);
  std::memcpy(p + kFixedBytes, path.data(), path.size());
  std::memcpy(p + kFixedBytes + path.size(), identity.data(), identity.size());
  return out;
}

// "<tenant>/<namespace>/<block>" split in three; nullopt unless there are exactly three
// non-empty parts. The names themselves are checked by the store's rules, not here.
struct PathParts {
  std::string_view tenant, ns, block;
};
inline std::optional<PathParts> SplitPath(std::string_view path) {
  size_t a = path.find('/');
  if (a == std::string_view::npos) return std::nullopt;
  size_t b = path.find('/', a + 1);
  if (b == std::string_view::npos || path.find('/', b + 1) != std::string_view::npos) return std::nullopt;
  PathParts parts{path.substr(0, a), path.substr(a + 1, b - a - 1), path.substr(b + 1)};
  if (parts.tenant.empty() || parts.ns.empty() || parts.block.empty()) return std::nullopt;
  return parts;
}

}  // namespace gpucache::commit_frame
