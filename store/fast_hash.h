// xxHash's XXH3 at the widest vector unit the CPU has. Debian's libxxhash (0.8.1 in Debian 12,
// 0.8.3 in 13) exports XXH3_*_dispatch entry points that pick AVX-512, AVX2 or SSE2 at run time;
// its plain XXH3_* functions are SSE2 only, a quarter of the speed on these machines
// (docs/performance.md, "The commit channel"). The dispatch header maps the plain names onto
// them; the hashes are the same bytes either way. Where the library has no dispatch (another
// architecture), CMake leaves GPUCACHE_XXH_DISPATCH unset and the plain functions serve.
#pragma once

#include <xxhash.h>

#if defined(GPUCACHE_XXH_DISPATCH)
#include <xxh_x86dispatch.h>
#endif
