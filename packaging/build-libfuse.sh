#!/usr/bin/env bash
# build-libfuse.sh — give gpucache a libfuse >= 3.17 without touching the
# system's libfuse3-* packages.
#
#   usage: build-libfuse.sh [PREFIX]        (default PREFIX=/opt/gpucache-libfuse)
#
# * Debian 13+ (libfuse3-dev 3.17.2 in trixie): nothing is built; installs the
#   distro's libfuse3-dev if missing (root) and prints how to use the system
#   pkg-config file.  GPUCACHE_LIBFUSE_FORCE_BUILD=1 builds privately anyway.
# * Debian 12: fetches Debian's own fuse3 3.17.2-3 source package (from trixie),
#   verifies pinned sha256 sums, unpacks it with dpkg-source (which re-checks the
#   .dsc checksums and applies Debian's patches), builds ONLY the library as a
#   static archive with meson/ninja and installs it into PREFIX:
#       PREFIX/include/fuse3/*.h
#       PREFIX/lib/libfuse3.a             (static only; no .so)
#       PREFIX/lib/pkgconfig/fuse3.pc
#   then use:  PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --static --libs fuse3
# * Idempotent: if PREFIX already holds the pinned version, exits at once.
#
# Build deps (Debian 12 and 13):  gcc libc6-dev meson ninja-build pkgconf
#                                 dpkg-dev xz-utils curl|wget ca-certificates
# (no udev/systemd-dev/python3-pytest: those are only for utils/tests, disabled here)
# Env: JOBS (default 1), WORKDIR (default a mktemp dir, removed afterwards),
#      MESON (meson binary; default /usr/bin/meson if present, else `meson`),
#      DEBIAN_MIRROR (default http://deb.debian.org/debian), NO_APT_INSTALL=1.
set -euo pipefail

PREFIX="${1:-/opt/gpucache-libfuse}"
FUSE_UPSTREAM=3.17.2
FUSE_DEBREV=3.17.2-3
MIN_VER=3.17.0
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
POOL="$DEBIAN_MIRROR/pool/main/f/fuse3"
# Where the pinned files stay once trixie moves on (Debian's archive of every upload).
SNAPSHOT="https://snapshot.debian.org/archive/debian/20251001T000000Z/pool/main/f/fuse3"
JOBS="${JOBS:-1}"
# name  sha256  size   (from the trixie Sources index, identical to the .dsc)
FILES=(
  "fuse3_${FUSE_DEBREV}.dsc              1339847e7e6512f31d61cf1fe4598341c4b8aa43ea6dc546914b21f96f29deb3 2428"
  "fuse3_${FUSE_UPSTREAM}.orig.tar.gz     3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f 5627028"
  "fuse3_${FUSE_UPSTREAM}.orig.tar.gz.asc df18d3972c68dd0e8f7ad2a544a24ac54d48aa4b42d99b717448f7fe8e71cea4 314"
  "fuse3_${FUSE_DEBREV}.debian.tar.xz     eaf7a177761ae8bf99ea97619f2cccf83f169b4f000e17b6106834e69456b5a2 19440"
)

log() { printf '[build-libfuse] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- 1. system libfuse already new enough (Debian 13 / trixie and later)? ----
# Only the system's own pkg-config dirs count here (a caller's PKG_CONFIG_PATH,
# e.g. pointing at an earlier private build, is ignored for this check).
sys_pc() { env -u PKG_CONFIG_PATH pkg-config "$@" 2>/dev/null; }
use_system() {
  log "system libfuse3-dev is $1 (>= $MIN_VER): nothing to build."
  log "use the system pkg-config file (no PKG_CONFIG_PATH needed):"
  log "  pkg-config --cflags --libs fuse3  -> $(sys_pc --cflags --libs fuse3)"
  log "CMake: pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET fuse3>=$MIN_VER) works unchanged."
  echo "system"
  exit 0
}
if [ "${GPUCACHE_LIBFUSE_FORCE_BUILD:-0}" != 1 ]; then
  if sysver=$(sys_pc --modversion fuse3) && dpkg --compare-versions "$sysver" ge "$MIN_VER"; then
    use_system "$sysver"
  fi
  # Debian 13+: the distro's own libfuse3-dev is new enough, just not installed yet.
  cand=$(apt-cache policy libfuse3-dev 2>/dev/null | awk '/Candidate:/{print $2}')
  if [ -n "$cand" ] && [ "$cand" != "(none)" ] && dpkg --compare-versions "$cand" ge "$MIN_VER"; then
    if [ "${NO_APT_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ]; then
      log "installing the distro's libfuse3-dev $cand"
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends libfuse3-dev pkgconf >&2
      sysver=$(sys_pc --modversion fuse3) && use_system "$sysver"
    fi
    die "apt has libfuse3-dev $cand: run 'apt-get install libfuse3-dev' (or GPUCACHE_LIBFUSE_FORCE_BUILD=1)"
  fi
fi

# ---- 2. idempotency: prefix already holds the pinned build? -----------------
PC="$PREFIX/lib/pkgconfig/fuse3.pc"
STAMP="$PREFIX/.gpucache-libfuse-${FUSE_DEBREV}"
if [ -f "$STAMP" ] && [ -f "$PC" ] && [ -f "$PREFIX/lib/libfuse3.a" ] \
   && [ "$(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" PKG_CONFIG_LIBDIR=/nonexistent \
          pkg-config --modversion fuse3 2>/dev/null)" = "$FUSE_UPSTREAM" ]; then
  log "$PREFIX already has libfuse $FUSE_UPSTREAM (Debian $FUSE_DEBREV); nothing to do."
  echo "$PREFIX"
  exit 0
fi

# ---- 3. build dependencies ---------------------------------------------------
MESON="${MESON:-}"
if [ -z "$MESON" ]; then
  if [ -x /usr/bin/meson ]; then MESON=/usr/bin/meson; else MESON=meson; fi
fi
need_pkgs=()
command -v cc >/dev/null          || need_pkgs+=(gcc libc6-dev)
command -v "$MESON" >/dev/null    || need_pkgs+=(meson)
command -v ninja >/dev/null       || need_pkgs+=(ninja-build)
command -v pkg-config >/dev/null  || need_pkgs+=(pkgconf)
command -v dpkg-source >/dev/null || need_pkgs+=(dpkg-dev)
command -v xz >/dev/null          || need_pkgs+=(xz-utils)
command -v curl >/dev/null || command -v wget >/dev/null || need_pkgs+=(curl ca-certificates)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "${NO_APT_INSTALL:-0}" = 1 ] || [ "$(id -u)" != 0 ]; then
    die "missing build deps; run: apt-get install --no-install-recommends ${need_pkgs[*]}"
  fi
  log "installing build deps: ${need_pkgs[*]}"
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need_pkgs[@]}" >&2
  [ -x /usr/bin/meson ] && [ "$MESON" = meson ] && MESON=/usr/bin/meson
fi
log "meson $("$MESON" --version), ninja $(ninja --version)"

# ---- 4. fetch + verify + unpack Debian's source package ----------------------
OWN_WORKDIR=0
if [ -z "${WORKDIR:-}" ]; then WORKDIR=$(mktemp -d /tmp/gpucache-libfuse.XXXXXX); OWN_WORKDIR=1; fi
mkdir -p "$WORKDIR/dl"
cleanup() { [ "$OWN_WORKDIR" = 1 ] && rm -rf "$WORKDIR"; return 0; }
trap cleanup EXIT

fetch() {  # url dest
  if command -v curl >/dev/null; then curl -fsSL --retry 3 -o "$2" "$1"
  else wget -q -O "$2" "$1"; fi
}
for entry in "${FILES[@]}"; do
  read -r name sum size <<<"$entry"
  f="$WORKDIR/dl/$name"
  if ! { [ -f "$f" ] && echo "$sum  $f" | sha256sum -c --status; }; then
    log "downloading $name ($size bytes)"
    fetch "$POOL/$name" "$f" || fetch "$SNAPSHOT/$name" "$f" \
      || die "download of $POOL/$name failed (trixie may have moved to a newer revision; \
check 'apt-cache showsrc fuse3' against trixie and update the pins)"
  fi
  echo "$sum  $f" | sha256sum -c --status || die "sha256 mismatch for $name"
done
SRC="$WORKDIR/fuse3-$FUSE_UPSTREAM"
rm -rf "$SRC"
# dpkg-source verifies the .dsc's Checksums-* fields and applies debian/patches.
# (No OpenPGP check: debian-keyring is normally absent; the pinned sha256 above is
# the trust anchor, taken from trixie's signed Sources index.)
( cd "$WORKDIR/dl" && dpkg-source -x "fuse3_${FUSE_DEBREV}.dsc" "$SRC" >&2 )
grep -q "version: '$FUSE_UPSTREAM'" "$SRC/meson.build" || die "unexpected source tree"

# ---- 5. configure, build, install (library + headers + .pc only) -------------
BUILD="$WORKDIR/build"
rm -rf "$BUILD"
"$MESON" setup "$BUILD" "$SRC" \
  --prefix="$PREFIX" --libdir=lib \
  --buildtype=release -Db_ndebug=false \
  -Ddefault_library=static -Db_staticpic=true \
  -Dutils=false -Dexamples=false -Dtests=false \
  -Duseroot=false >&2
ninja -C "$BUILD" -j "$JOBS" >&2
rm -rf "$PREFIX/include/fuse3" "$PREFIX/lib/libfuse3.a" "$PC"
"$MESON" install -C "$BUILD" --no-rebuild >&2

# ---- 6. verify ----------------------------------------------------------------
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
got=$(PKG_CONFIG_LIBDIR=/nonexistent pkg-config --modversion fuse3)
[ "$got" = "$FUSE_UPSTREAM" ] || die "pkg-config reports $got, expected $FUSE_UPSTREAM"
hdr="$PREFIX/include/fuse3"
for sym in FUSE_CAP_PASSTHROUGH fuse_passthrough_open fuse_passthrough_close backing_id; do
  grep -rqw "$sym" "$hdr" || die "headers lack $sym"
done
cat >"$WORKDIR/t.c" <<'EOF'
#define FUSE_USE_VERSION 317
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  /* reference the passthrough API so the static link must resolve it */
  int (*po)(fuse_req_t, int) = fuse_passthrough_open;
  int (*pc)(fuse_req_t, int) = fuse_passthrough_close;
  struct fuse_file_info fi; memset(&fi, 0, sizeof fi); fi.backing_id = 0;
  printf("%s %d cap_passthrough=0x%llx %p %p\n", fuse_pkgversion(), fuse_version(),
         (unsigned long long)FUSE_CAP_PASSTHROUGH, (void *)po, (void *)pc);
  return strncmp(fuse_pkgversion(), "3.17.", 5) != 0;
}
EOF
# shellcheck disable=SC2046
cc -o "$WORKDIR/t" "$WORKDIR/t.c" $(pkg-config --cflags fuse3) $(pkg-config --libs fuse3) >&2 \
   || die "test program failed to link against $PREFIX/lib/libfuse3.a"
out=$("$WORKDIR/t") || die "test program reported a wrong version: $out"
log "verified: $out"
ldd "$WORKDIR/t" | grep -q libfuse3 && die "test program picked up a shared libfuse3"

touch "$STAMP"
log "installed libfuse $FUSE_UPSTREAM (Debian $FUSE_DEBREV) into $PREFIX"
log "use: PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config --cflags --libs fuse3"
log "  -> $(pkg-config --cflags --libs fuse3)   (static-only: Libs already lists -lpthread -ldl -lrt)"
log "CMake: PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig cmake ...   (pkg_check_modules(FUSE3 REQUIRED"
log "       IMPORTED_TARGET fuse3>=$MIN_VER) resolves -lfuse3 to $PREFIX/lib/libfuse3.a)"
echo "$PREFIX"
