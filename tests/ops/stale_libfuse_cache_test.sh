#!/usr/bin/env bash
# A build directory configured before packaging/build-libfuse.sh installed libfuse 3.17 caches
# the system's libfuse3.so (3.14); configuring it again must link the private 3.17 instead.
# Skipped where no private libfuse exists (Debian 13 links its own 3.17).
set -euo pipefail
src=$1
prefix=/opt/gpucache-libfuse
if [ ! -e "$prefix/lib/pkgconfig/fuse3.pc" ]; then
  echo "SKIP: no private libfuse under $prefix (the system's is new enough)"; exit 0
fi
stale=$(ls /usr/lib/*/libfuse3.so* 2>/dev/null | head -1 || true)
[ -n "$stale" ] || stale=/usr/lib/libfuse3.so
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake -S "$src" -B "$dir" -Dpkgcfg_lib_FUSE3_fuse3="$stale" >/dev/null
found=$(sed -n 's/^pkgcfg_lib_FUSE3_fuse3:FILEPATH=//p' "$dir/CMakeCache.txt")
echo "stale cache entry: $stale; after configure: $found"
case "$found" in
  "$prefix"/*) echo "PASS" ;;
  *) echo "FAIL: the build would link $found, not the libfuse under $prefix"; exit 1 ;;
esac
