#!/usr/bin/env bash
# Build gpucache on a Debian 12 or 13 machine (as root) and either mount it or test it.
#   packaging/dev.sh run    mount at /mnt/gpucache with the built-in defaults until Ctrl-C
#   packaging/dev.sh test   run every test (unit, mount, cold tier against a local S3, Python and vLLM)
#   packaging/dev.sh build  only build
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=${1:-build}
case "$cmd" in run|test|build) ;; *) echo "usage: $0 run|test|build" >&2; exit 64 ;; esac

packaging/install-deps.sh "$([ "$cmd" = test ] && echo test || echo build)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

case "$cmd" in
  run)
    mnt=${GPUCACHE_MOUNTPOINT:-/mnt/gpucache}
    mkdir -p "$mnt"
    # A mount left behind by a killed daemon answers ENOTCONN; clear it first (only such a
    # mount: one that answers may be the packaged service's).
    packaging/gpucache-unmount-stale "$mnt"
    echo "gpucachefs: mounting at $mnt (data in /var/lib/gpucache); Ctrl-C unmounts"
    exec build/gpucachefs --defaults "$mnt" -f
    ;;
  test)
    exec ctest --test-dir build --output-on-failure -j2
    ;;
esac
