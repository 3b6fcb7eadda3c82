#!/usr/bin/env bash
# The man pages: groff and man(1) have no warning for any of them, gpucachectl.1 documents every
# subcommand the binary has (the cold family included), and gpucachefs.8 has the sections an
# administrator looks for.   man_pages_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
fail() { echo "FAIL: $*"; exit 1; }

for page in "$src"/packaging/man/*.[18]; do
  warnings=$( { groff -ww -man -z "$page"; MANWIDTH=100 man --warnings -l "$page" >/dev/null; } 2>&1)
  [ -z "$warnings" ] || fail "$page: $warnings"
done

ctl_page=$(MANWIDTH=200 man -l "$src/packaging/man/gpucachectl.1" 2>/dev/null)
# A quote that groff did not take as an argument delimiter shows up at a line's end.
! grep -nE '"$' <<<"$ctl_page" || fail "gpucachectl.1: a stray quote"
# CLI11 lists subcommands as "  NAME   help" under "Subcommands:".
subcommands() { "$build/gpucachectl" "$@" --help | awk 'tolower($0) ~ /^subcommands:/ {on = 1; next} on && NF {print $1}'; }
n=0
for sub in $(subcommands); do
  [ "$sub" = cold ] && continue
  grep -qE "^ +(.*, )?$sub( |$)" <<<"$ctl_page" || fail "gpucachectl.1 lacks '$sub'"
  n=$((n + 1))
done
for sub in $(subcommands cold); do
  grep -qE "^ +cold $sub( |$)" <<<"$ctl_page" || fail "gpucachectl.1 lacks 'cold $sub'"
  n=$((n + 1))
done
[ "$n" -ge 20 ] || fail "only $n subcommands found in gpucachectl --help: did its format change?"

fs_page=$(MANWIDTH=200 man -l "$src/packaging/man/gpucachefs.8" 2>/dev/null)
for section in SIGNALS ENVIRONMENT FILES 'EXIT STATUS'; do
  grep -qx "$section" <<<"$fs_page" || fail "gpucachefs.8 has no $section section"
done
for word in SIGHUP SIGTERM GPUCACHE_S3_ENDPOINT GPUCACHE_FAILPOINTS INDEX JOURNAL EPOCH LOCK; do
  grep -qw "$word" <<<"$fs_page" || fail "gpucachefs.8 does not mention $word"
done
echo "man pages: $n gpucachectl subcommands documented, no warnings"
