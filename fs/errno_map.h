// The one place where a store StatusCode becomes an errno at the FUSE boundary
// (docs/architecture.md, "Errors at the FUSE boundary").
// tests/fs/errno_map_test.cc walks every code.
#pragma once

#include "store/status.h"

namespace gpucache {

int ToErrno(StatusCode code);

}  // namespace gpucache
