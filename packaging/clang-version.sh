#!/usr/bin/env bash
# Prints the clang major version of this Debian release (its default clang): the clang-N that
# packaging/install-deps.sh installs and thread_safety.sh and fuzz.sh build with. Exits 1 with a
# message on a release gpucache does not support, unless GPUCACHE_ALLOW_UNSUPPORTED=1.
set -euo pipefail
. /etc/os-release
# VERSION_ID alone misses testing/sid, which only set VERSION_CODENAME.
case "${ID:-}:${VERSION_ID:-}:${VERSION_CODENAME:-}" in
  debian:12:*|debian:*:bookworm) echo 14; exit 0 ;;
  debian:13:*|debian:*:trixie) echo 19; exit 0 ;;
esac
if [[ "${GPUCACHE_ALLOW_UNSUPPORTED:-}" != 1 ]]; then
  echo "gpucache supports Debian 12 (bookworm) and Debian 13 (trixie)," \
    "not ${PRETTY_NAME:-this system}; GPUCACHE_ALLOW_UNSUPPORTED=1 tries anyway" >&2
  exit 1
fi
# Unsupported: the newest clang-N installed (so the answer holds after install-deps.sh ran),
# else the release's default clang as apt knows it, else Debian 13's.
set +o pipefail  # no clang installed or known is not an error here
v=$(ls /usr/bin/clang-[0-9]* 2>/dev/null | sed 's/.*clang-//' | sort -n | tail -1)
[[ -n "$v" ]] ||
  v=$(apt-cache depends clang 2>/dev/null | sed -n 's/^ *Depends: clang-\([0-9]*\)$/\1/p' | head -1)
echo "${v:-19}"
