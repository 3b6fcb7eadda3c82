#!/usr/bin/env bash
# The package's upgrade (packaging/debian/postinst configure OLD-VERSION): a gpucachefs started
# by hand or from fstab keeps running the replaced binary, and the upgrade names it (pid and
# command line) instead of saying nothing. A first install names nothing. A stand-in binary
# (a copy of sleep named gpucachefs) plays the daemon.
set -euo pipefail
src=$1
work=$(mktemp -d /tmp/gpucache-upgrade-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

bin=$work/gpucachefs
cp "$(command -v sleep)" "$bin"
"$bin" 300 &
pid=$!
run() { GPUCACHE_MAINT_TEST=1 GPUCACHE_DATA_DIR=$work/data GPUCACHE_BIN=$bin sh "$src/packaging/debian/postinst" "$@"; }

run configure >"$work/out" || fail "first install exited $?"
[ -d "$work/data" ] || fail "the data directory was not made"
[ ! -s "$work/out" ] || fail "a first install said: $(cat "$work/out")"

run configure 0.1 >"$work/out" || fail "upgrade exited $?"
[ ! -s "$work/out" ] || fail "the binary was not replaced, yet the upgrade said: $(cat "$work/out")"

# dpkg replaces the binary by renaming the new one over it.
cp "$(command -v sleep)" "$bin.dpkg-new" && mv "$bin.dpkg-new" "$bin"
run configure 0.1 >"$work/out" || fail "upgrade exited $?"
grep -q "pid $pid ($bin 300 ) still runs the old binary" "$work/out" ||
  fail "the upgrade did not name pid $pid: $(cat "$work/out")"
[ "$(wc -l <"$work/out")" = 1 ] || fail "the upgrade named more than the one daemon: $(cat "$work/out")"

# The service's restart, with systemd played by stand-ins on PATH (systemctl, deb-systemd-invoke)
# and a stand-in daemon whose --check-config refuses a file that says "unknown_key".
# Regression (review, 2026-12-07): the upgrade restarted a serving daemon before anyone knew
# whether the new version accepted its configuration; one that did not stayed down.
fake=$work/fakebin
mkdir -p "$fake" "$work/systemd"
echo 4242 >"$work/mainpid"
echo "GPUCACHE_CONFIG=$work/unit.toml GPUCACHE_MOUNTPOINT=/mnt/gpucache" >"$work/environment"
cat >"$fake/systemctl" <<FAKE
#!/bin/sh
case "\$*" in
  *"-p EnvironmentFiles"*) [ -e "$work/envfiles" ] && cat "$work/envfiles" ;;
  *"-p Environment"*) cat "$work/environment" ;;
  *"-p MainPID"*) cat "$work/mainpid" ;;
esac
exit 0
FAKE
cat >"$fake/deb-systemd-invoke" <<FAKE
#!/bin/sh
echo "\$*" >>"$work/invoked"
[ -e "$work/policy-denies" ] || echo 5151 >"$work/mainpid"
exit 0
FAKE
cat >"$work/checker" <<FAKE
#!/bin/sh
echo "\$*" >"$work/checked"
FAKE
cat >>"$work/checker" <<'FAKE'
[ "$1" = --check-config ] || exit 64
if grep -q unknown_key "$2"; then echo "$2:1: key 'unknown_key' is not known" >&2; exit 78; fi
# As the daemon's cold tier: the keys come from the environment (docs/cold-tier.md).
if grep -q '^\[cold\]' "$2"; then
  [ -n "${GPUCACHE_S3_ACCESS_KEY:-}" ] || { echo "[cold] s3 access key is empty" >&2; exit 78; }
  [ "${GPUCACHE_S3_SECRET_KEY:-}" = 'se cr"et' ] || { echo "[cold] s3 secret key is empty" >&2; exit 78; }
  [ "${GPUCACHE_S3_ENDPOINT:-}" = "http://rgw:7480" ] || { echo "[cold] no endpoint" >&2; exit 78; }
fi
exit 0
FAKE
chmod +x "$fake/systemctl" "$fake/deb-systemd-invoke" "$work/checker"
restart() {
  PATH=$fake:$PATH GPUCACHE_MAINT_TEST=1 GPUCACHE_SYSTEMD_DIR=$work/systemd GPUCACHE_DATA_DIR=$work/data \
    GPUCACHE_BIN=$work/checker sh "$src/packaging/debian/postinst" configure 0.1 >"$work/out" 2>&1
}
echo "unknown_key = 1" >"$work/unit.toml"
restart || fail "upgrade exited $?"
[ ! -e "$work/invoked" ] || fail "restarted a service whose configuration the new version refuses"
grep -q "NOT restarting gpucachefs.service: the new version refuses $work/unit.toml" "$work/out" ||
  fail "the refusal was not said: $(cat "$work/out")"
echo "data_dir = \"/x\"" >"$work/unit.toml"
restart || fail "upgrade exited $?"
grep -q "restart gpucachefs.service" "$work/invoked" || fail "a good configuration was not restarted"
# The check is start-up's: the mountpoint's relation to the data directories included.
[ "$(cat "$work/checked")" = "--check-config $work/unit.toml /mnt/gpucache" ] ||
  fail "the new version checked: $(cat "$work/checked")"
grep -q "restarted gpucachefs.service on the new version" "$work/out" || fail "$(cat "$work/out")"
rm "$work/invoked"
touch "$work/policy-denies"
restart || fail "upgrade exited $?"
grep -q "was not restarted" "$work/out" ||
  fail "a restart policy-rc.d forbade was reported as done: $(cat "$work/out")"
rm "$work/policy-denies" "$work/invoked"

# Regression (2026-12-07): GPUCACHE_CONFIG set in an EnvironmentFile= (a drop-in from
# `systemctl edit`) overrides Environment=, as systemd applies it; the check read Environment=
# alone, so it passed the packaged file and restarted into a configuration it never checked.
cat >"$work/env" <<'ENV'
# the site's settings
GPUCACHE_CONFIG="ENVFILE_TOML"
GPUCACHE_MOUNTPOINT=/srv/kv
ENV
sed -i "s|ENVFILE_TOML|$work/site.toml|" "$work/env"
printf '%s (ignore_errors=no)\n%s (ignore_errors=yes)\n' "$work/env" "$work/missing" >"$work/envfiles"
echo "unknown_key = 1" >"$work/site.toml"
restart || fail "upgrade exited $?"
[ ! -e "$work/invoked" ] || fail "restarted into an EnvironmentFile's configuration the new version refuses"
grep -q "NOT restarting gpucachefs.service: the new version refuses $work/site.toml" "$work/out" ||
  fail "the EnvironmentFile's configuration was not the one checked: $(cat "$work/out")"
echo "data_dir = \"/x\"" >"$work/site.toml"
restart || fail "upgrade exited $?"
[ "$(cat "$work/checked")" = "--check-config $work/site.toml /srv/kv" ] ||
  fail "the new version checked: $(cat "$work/checked")"

# Regression (review, 2026-12-08): the check ran in dpkg's environment with only GPUCACHE_CONFIG
# and GPUCACHE_MOUNTPOINT borrowed from the unit, so a cold tier whose keys sit in an
# EnvironmentFile= (as docs/cold-tier.md recommends) was refused ("s3 access key is empty")
# and every upgrade left the old binary serving. The check now gets the unit's whole
# environment: Environment= (quoted as systemctl show quotes it) and every EnvironmentFile=.
rm -f "$work/invoked"
printf '[cold]\nenabled = true\n' >"$work/site.toml"
cat >"$work/keys.env" <<'ENV'
# written by `systemctl edit gpucachefs`
GPUCACHE_S3_ACCESS_KEY=AKIDEXAMPLE
  GPUCACHE_S3_SECRET_KEY = "se cr\"et"
ENV
printf '%s (ignore_errors=no)\n%s (ignore_errors=no)\n' "$work/env" "$work/keys.env" >"$work/envfiles"
echo "GPUCACHE_MOUNTPOINT=/mnt/gpucache \"GPUCACHE_S3_ENDPOINT=http://rgw:7480\"" >"$work/environment"
restart || fail "upgrade exited $?"
grep -q "restart gpucachefs.service" "$work/invoked" 2>/dev/null ||
  fail "the unit's S3 keys were not given to the check: $(cat "$work/out")"
rm "$work/invoked"
# dpkg's own environment is not the daemon's: a key exported in the shell that ran apt passes
# no check the restarted daemon would then fail.
printf '%s (ignore_errors=no)\n' "$work/env" >"$work/envfiles"
GPUCACHE_S3_ACCESS_KEY=stray GPUCACHE_S3_SECRET_KEY='se cr"et' restart || fail "upgrade exited $?"
[ ! -e "$work/invoked" ] || fail "the check borrowed S3 keys from dpkg's environment"
grep -q "s3 access key is empty" "$work/out" || fail "the refusal was not said: $(cat "$work/out")"
# A required EnvironmentFile= that is missing fails the start: no restart, and it is named.
printf '%s (ignore_errors=no)\n' "$work/gone.env" >"$work/envfiles"
restart || fail "upgrade exited $?"
[ ! -e "$work/invoked" ] || fail "restarted a unit whose EnvironmentFile is missing"
grep -q "NOT restarting gpucachefs.service: its EnvironmentFile $work/gone.env cannot be read" "$work/out" ||
  fail "the missing file was not named: $(cat "$work/out")"

# Regression (review, 2026-12-08): GPUCACHE_DATA_DIR and GPUCACHE_BIN were honoured from any
# environment, and apt passes a root shell's on. Without GPUCACHE_MAINT_TEST=1 they are
# ignored: in a private mount namespace whose /var/lib is an empty tmpfs, postinst makes
# /var/lib/gpucache and not the stray directory, and names no daemon of the stray binary.
unshare --mount --propagation private bash -euc "
  mount -t tmpfs tmpfs /var/lib
  # No systemd here: nothing of a real gpucachefs.service is reloaded or restarted.
  if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd; fi
  GPUCACHE_DATA_DIR=$work/stray GPUCACHE_BIN=$bin GPUCACHE_SYSTEMD_DIR=$work/systemd \\
    sh $src/packaging/debian/postinst configure 0.1 >$work/out
  [ -d /var/lib/gpucache ] || { echo 'FAIL: /var/lib/gpucache was not made'; exit 1; }
" || fail "postinst without GPUCACHE_MAINT_TEST=1"
[ ! -e "$work/stray" ] || fail "GPUCACHE_DATA_DIR was honoured without GPUCACHE_MAINT_TEST=1"
! grep -q "pid $pid" "$work/out" || fail "GPUCACHE_BIN was honoured without GPUCACHE_MAINT_TEST=1"
echo "upgrade: 13 passed, 0 failed"
