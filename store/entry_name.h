// The name of an entry in a namespace directory: a committed block's (`<block>`) or its
// reservation's (`<block>.part`). Create, lookup, unlink and rename each split the suffix off
// by hand, and not alike (one took ".part" alone for a reservation of the empty name); this is
// the one place it is done.
#pragma once

#include <string_view>

#include "store/layout.h"

namespace gpucache {

struct EntryName {
  std::string_view block;  // not checked: IsValidBlockName says whether it can be one
  bool part = false;       // a reservation's name
};

// ".part" alone names no reservation: it is a block name (an invalid one).
inline EntryName ParseEntryName(std::string_view name) {
  if (name.size() <= kPartSuffix.size() || !name.ends_with(kPartSuffix)) return {name, false};
  return {name.substr(0, name.size() - kPartSuffix.size()), true};
}

}  // namespace gpucache
