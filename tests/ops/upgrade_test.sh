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
run() { GPUCACHE_DATA_DIR=$work/data GPUCACHE_BIN=$bin sh "$src/packaging/debian/postinst" "$@"; }

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
echo "upgrade: 3 passed, 0 failed"
