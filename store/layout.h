// Where a block lives: the path is a pure, documented function of the physical key.
//
//   <tenant>/<namespace>/<block>
//   namespace = <slug> "-" hex(XXH3-128(GPCN encoding))   slug is cosmetic: model.dtype.tpXofY.ppXofY
//   block     = hex(XXH3-128(GPCE encoding))              chain, valid length, multimodal digests
//
// Blocks that differ only by their prefix chain share one namespace directory, so a longest-
// prefix probe is a run of stat() calls in one directory. Two engines with the same identity
// compute the same path without talking to the daemon. docs/identity-encoding.md gives the
// exact rules; tests/vectors/identity.json pins them for C++ and Python alike.
#pragma once

#include <string>
#include <string_view>

#include "store/identity.h"

namespace gpucache {

inline constexpr size_t kDigestHexLength = 32;  // XXH3-128, lowercase hex
inline constexpr size_t kMaxSlugLength = 80;
inline constexpr std::string_view kPartSuffix = ".part";

struct BlockAddress {
  std::string tenant;
  std::string ns;     // namespace directory name
  std::string block;  // block file name (without ".part")

  bool operator==(const BlockAddress&) const = default;
  auto operator<=>(const BlockAddress&) const = default;
  std::string RelativePath() const { return tenant + "/" + ns + "/" + block; }
};

std::string NamespaceSlug(const CacheIdentity& id);
std::string NamespaceName(const CacheIdentity& id);
std::string BlockName(const CacheIdentity& id);
// REQUIRES: Validate(id) == kOk.
BlockAddress AddressOf(const CacheIdentity& id);

// Shape checks for names arriving from outside (mkdir, create, lookup). They say nothing
// about whether the name matches any identity; commit checks that.
bool IsValidNamespaceName(std::string_view name);
bool IsValidBlockName(std::string_view name);

// Lowercase hex of XXH3-128 in canonical (big-endian) order, as Python's xxh3_128_hexdigest.
std::string Xxh128Hex(std::span<const uint8_t> bytes);

}  // namespace gpucache
