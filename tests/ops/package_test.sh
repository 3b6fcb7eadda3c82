#!/usr/bin/env bash
# The .deb: built with CPack from the build tree, unpacked into a scratch root, checked for its
# files and conffile, its binaries run, and lintian has nothing to say.
set -euo pipefail
build=$1
out=$(mktemp -d /tmp/gpucache-deb-XXXXXX)
trap 'rm -rf "$out"' EXIT
(cd "$build" && cpack -G DEB -B "$out" >/dev/null)
deb=$(ls "$out"/gpucache_*_amd64.deb)
root="$out/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/gpucachefs usr/bin/gpucachectl usr/bin/gpucache-client \
         lib/systemd/system/gpucachefs.service etc/gpucache/gpucache.toml \
         usr/share/man/man8/gpucachefs.8.gz usr/share/man/man1/gpucachectl.1.gz \
         usr/share/doc/gpucache/copyright usr/share/doc/gpucache/configuration.md; do
  [ -e "$root/$f" ] || { echo "missing from the package: /$f"; exit 1; }
done
dpkg-deb -e "$deb" "$out/control"
grep -qx /etc/gpucache/gpucache.toml "$out/control/conffiles" || { echo "config is not a conffile"; exit 1; }
dpkg-deb -f "$deb" Depends | grep -q 'fuse3' || { echo "Depends lacks fuse3"; exit 1; }
"$root/usr/bin/gpucachefs" --version | grep -q '^gpucachefs 0.1.0$'
"$root/usr/bin/gpucachefs" --check-config "$root/etc/gpucache/gpucache.toml" >/dev/null
"$root/usr/bin/gpucachectl" --help >/dev/null
report=$(lintian --tag-display-limit 0 "$deb" 2>&1 | grep -E '^[EW]: ' || true)
if [ -n "$report" ]; then echo "lintian:"; echo "$report"; exit 1; fi
echo "package: 1 passed, 0 failed"
