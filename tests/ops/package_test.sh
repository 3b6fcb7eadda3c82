#!/usr/bin/env bash
# The .debs: built with CPack from the build tree; their files, conffile and maintainer scripts;
# lintian has nothing to say. Then their lifecycle on this machine (root): apt installs them,
# the Python client imports and the C++ client links, `mount -t fuse.gpucachefs` mounts nosuid,
# nodev and commits a block, and `apt remove` with that mount up leaves no daemon and no mount
# but keeps the data (docs/operations.md, "Package lifecycle").
set -euo pipefail
build=$1
out=$(mktemp -d /tmp/gpucache-deb-XXXXXX)
mnt=$out/mnt
other=$out/other  # served by the build tree's gpucachefs, not the package's
data=/var/lib/gpucache
had_data=no
[ -e $data ] && had_data=yes
fail() { echo "FAIL: $*"; exit 1; }
daemons() {  # this package's daemons, whoever started them
  for exe in /proc/[0-9]*/exe; do
    case "$(readlink "$exe" 2>/dev/null)" in /usr/bin/gpucachefs*) echo "${exe//[!0-9]/}";; esac
  done
}
cleanup() {
  pids=$(daemons); [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  fusermount3 -u -z "$mnt" 2>/dev/null || true
  fusermount3 -u -z "$other" 2>/dev/null || true
  dpkg -r gpucache gpucache-dev >/dev/null 2>&1 || true
  if [ $had_data = no ]; then dpkg --purge gpucache >/dev/null 2>&1 || true; rm -rf $data; fi
  rm -rf "$out"
}
trap cleanup EXIT
# Another run of this test (another checkout) would fight over the installed package.
exec 9>/tmp/gpucache-package-test.lock
flock -w 300 9 || fail "another package test holds the lock"

(cd "$build" && cpack -G DEB -B "$out" >/dev/null)
deb=$(ls "$out"/gpucache_*_amd64.deb)
dev=$(ls "$out"/gpucache-dev_*_amd64.deb)
root="$out/root"
dpkg-deb -x "$deb" "$root"
dpkg-deb -x "$dev" "$root"
for f in usr/bin/gpucachefs usr/bin/gpucachectl usr/bin/gpucache-client sbin/mount.fuse.gpucachefs \
         lib/systemd/system/gpucachefs.service etc/gpucache/gpucache.toml \
         usr/share/man/man8/gpucachefs.8.gz usr/share/man/man1/gpucachectl.1.gz \
         usr/share/man/man8/mount.fuse.gpucachefs.8.gz \
         usr/share/doc/gpucache/copyright usr/share/doc/gpucache/configuration.md \
         usr/share/doc/gpucache/examples/identity.toml \
         usr/share/gpucache/monitoring/gpucache-rules.yml usr/share/gpucache/monitoring/gpucache-dashboard.json \
         usr/lib/python3/dist-packages/gpucache/__init__.py \
         usr/lib/python3/dist-packages/gpucache/client.py \
         usr/include/gpucache/clients/cpp/mount_client.h usr/include/gpucache/store/identity.h \
         usr/lib/x86_64-linux-gnu/libgpucache_client.a usr/lib/x86_64-linux-gnu/libgpucache_format.a \
         usr/lib/x86_64-linux-gnu/pkgconfig/gpucache-client.pc; do
  # /lib and /sbin on Debian 12, /usr/lib and /usr/sbin on Debian 13 (merged /usr)
  [ -e "$root/$f" ] || [ -e "$root/usr/$f" ] || fail "missing from the packages: /$f"
done
dpkg-deb -e "$deb" "$out/control"
grep -qx /etc/gpucache/gpucache.toml "$out/control/conffiles" || fail "config is not a conffile"
dpkg-deb -f "$deb" Depends | grep -q 'fuse3' || fail "Depends lacks fuse3"
info=$(dpkg-deb -I "$deb")
for script in postinst prerm postrm; do
  grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\* +$script +#!/bin/sh" <<<"$info" \
    || fail "dpkg-deb -I shows no executable $script"
done
"$root/usr/bin/gpucachefs" --version | grep -q '^gpucachefs 0.1.0$'
"$root/usr/bin/gpucachefs" --check-config "$root/etc/gpucache/gpucache.toml" >/dev/null
"$root/usr/bin/gpucachectl" --help >/dev/null
report=$(lintian --tag-display-limit 0 "$deb" "$dev" 2>&1 | grep -E '^[EW]: ' || true)
[ -z "$report" ] || { echo "lintian:"; echo "$report"; fail "lintian has errors or warnings"; }

# The lifecycle. Dependencies are installed already (packaging/install-deps.sh), so apt
# downloads nothing.
[ -z "$(daemons)" ] || fail "a gpucachefs from /usr/bin runs already"
apt-get install -y -qq -o DPkg::Lock::Timeout=120 "$deb" "$dev" >/dev/null 2>&1 \
  || fail "apt-get install"
[ -d $data ] || fail "postinst made no $data"
# The Python client, with Debian's interpreter and no PYTHONPATH.
imported=$(cd / && env -u PYTHONPATH /usr/bin/python3 -c 'import gpucache; print(gpucache.__file__)')
[ "$imported" = /usr/lib/python3/dist-packages/gpucache/__init__.py ] || fail "python3 imports $imported"
# The C++ client from the -dev package alone: pkg-config, headers, static libraries.
cat >"$out/client.cc" <<'EOF'
// Reads a block through the mount with the packaged C++ client: client MNT IDENTITY.toml
#include <cstdio>
#include <variant>
#include "clients/cpp/identity_file.h"
#include "clients/cpp/mount_client.h"
int main(int, char** argv) {
  auto got = gpucache::MountClient(argv[1]).Read(gpucache::IdentityFromTomlFile(argv[2]));
  if (!std::holds_alternative<gpucache::Bytes>(got)) return 1;
  const gpucache::Bytes& b = std::get<gpucache::Bytes>(got);
  return std::fwrite(b.data(), 1, b.size(), stdout) == b.size() ? 0 : 2;
}
EOF
g++ -std=c++20 -o "$out/client" "$out/client.cc" $(pkg-config --cflags --libs gpucache-client) \
  || fail "the C++ client does not build from gpucache-dev"

# A mount started by hand, the way mount(8) does it, then `apt remove` with it up.
mkdir -p "$mnt"
cat >"$out/gpucache.toml" <<EOF
data_dir = "$data"
[metrics]
listen = ""
[tenants.default]
uids = [0]
EOF
mount -t fuse.gpucachefs "$out/gpucache.toml" "$mnt" || fail "mount -t fuse.gpucachefs"
opts=$(awk -v m="$mnt" '$5 == m {print $6}' /proc/self/mountinfo)
[[ ",$opts," == *,nosuid,* && ",$opts," == *,nodev,* ]] || fail "mount options $opts lack nosuid,nodev"
cat >"$out/identity.toml" <<EOF
tenant = "default"
trust_domain = "prod"
model_revision = "package-test@$$"
model_config_digest = "sha256:3f2a9c"
tokenizer_revision = "llama3@5206a32"
adapter = ""
chain = ["00112233445566778899aabbccddeeff", "0102030405060708"]
kv_dtype = "bf16"
quant_format = "none"
layout_abi = "vllm-nhd-v1"
tp_rank = 0
tp_size = 2
pp_rank = 0
pp_size = 1
position_encoding = "rope"
rope_theta = 500000.0
rope_scaling = "none"
rope_factor = 1.0
rope_original_max_positions = 0
block_capacity = 256
valid_length = 16
EOF
head -c 4096 /dev/urandom >"$out/payload"
gpucache-client put "$mnt" "$out/identity.toml" "$out/payload" >/dev/null || fail "gpucache-client put"
"$out/client" "$mnt" "$out/identity.toml" >"$out/got" || fail "the packaged C++ client cannot read the block"
cmp -s "$out/payload" "$out/got" || fail "read back other bytes"
blocks_before=$(find $data/blocks -type f 2>/dev/null | wc -l)
[ "$blocks_before" -ge 1 ] || fail "no block file under $data"
[ -n "$(daemons)" ] || fail "no daemon"
# A gpucachefs that is not this package's (a build tree's) keeps its mount through the removal.
mkdir -p "$other"
printf 'data_dir = "%s"\n[metrics]\nlisten = ""\n[tenants.default]\nuids = [0]\n' "$out/other-data" >"$out/other.toml"
"$build/gpucachefs" "$out/other.toml" "$other" 2>/dev/null || fail "the build tree's gpucachefs"

apt-get remove -y -qq -o DPkg::Lock::Timeout=120 gpucache gpucache-dev >/dev/null 2>&1 || fail "apt-get remove"
[ -z "$(daemons)" ] || fail "a daemon survived the removal: $(daemons)"
! grep -q " $mnt fuse.gpucachefs " /proc/mounts || fail "the mount survived the removal"
grep -q " $other fuse.gpucachefs " /proc/mounts || fail "the removal unmounted a gpucachefs not of this package"
fusermount3 -u "$other"
[ "$(find $data/blocks -type f | wc -l)" = "$blocks_before" ] || fail "remove lost data in $data"
# Purge deletes $data: only when this test made it, never an operator's cache.
if [ $had_data = no ]; then
  dpkg --purge gpucache >/dev/null || fail "dpkg --purge"
  [ ! -e $data ] || fail "purge left $data"
  [ ! -e /etc/gpucache/gpucache.toml ] || fail "purge left the configuration"
fi
echo "package: 1 passed, 0 failed"
