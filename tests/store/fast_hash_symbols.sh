#!/usr/bin/env bash
# fast_hash_symbols.sh LIB...: every archive given calls libxxhash's run-time dispatched XXH3
# (AVX2/AVX-512) and never the plain entry points, which are SSE2 only: a file that includes
# <xxhash.h> instead of store/fast_hash.h hashes at a quarter of the speed and still gives the
# same hashes, so only the symbols tell (docs/performance.md, "The commit channel").
set -euo pipefail
bad=0
for lib in "$@"; do
  plain=$(nm -u "$lib" | awk '{print $NF}' |
          grep -E '^XXH3_(64bits|64bits_withSeed|128bits|128bits_withSeed|64bits_update|128bits_update)$' || true)
  if [ -n "$plain" ]; then
    echo "$lib calls plain (SSE2) XXH3: $(echo $plain)" >&2
    bad=1
  fi
done
undefined=$(nm -u "$1")  # whole, not piped into grep -q: pipefail would see nm's SIGPIPE
if [[ "$undefined" != *XXH3_64bits_withSeed_dispatch* ]]; then
  echo "$1: no call of the dispatched XXH3_64bits_withSeed" >&2
  bad=1
fi
exit $bad
