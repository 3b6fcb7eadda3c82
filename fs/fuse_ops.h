// The libfuse low-level operations table. Every callback is thin: decode the request, call one
// Filesystem method, reply. The session's userdata is the Filesystem.
#pragma once

#include <fuse_lowlevel.h>

namespace gpucache {

const fuse_lowlevel_ops& FuseOperations();

}  // namespace gpucache
