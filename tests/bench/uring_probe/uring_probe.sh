#!/usr/bin/env bash
# FUSE over io_uring against /dev/fuse, on libfuse's own passthrough_hp (issue 27, item 4):
# the cost of a round trip, without gpucache's own work in it. Needs a passthrough_hp built
# from libfuse >= 3.18 with io_uring (docs/performance.md, "FUSE over io_uring" says how);
# contacts nothing. Backing directory on tmpfs, so the disk is not measured.
#   tests/bench/uring_probe/uring_probe.sh PASSTHROUGH_HP [ROUNDS] [OPS]
# Prints, per round, microseconds per stat and per 64 KiB create/write/close/rename through
# each mount and directly on the tmpfs, then the medians and the ratios plain/uring.
set -euo pipefail
hp=${1:?usage: $0 PASSTHROUGH_HP [ROUNDS] [OPS]}
rounds=${2:-5} ops=${3:-2000}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d) src=/dev/shm/gpucache-uring-probe-$$
mnt=$work/mnt
mkdir -p "$mnt" "$src"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work" "$src"; }
trap cleanup EXIT
cc -O2 -o "$work/round_trips" "$here/round_trips.c"
param=/sys/module/fuse/parameters/enable_uring
[ -w "$param" ] || { echo "no $param: this kernel has no FUSE over io_uring" >&2; exit 1; }
old=$(cat "$param")
trap 'echo "$old" > "$param"; cleanup' EXIT
echo Y > "$param"

one() {  # mode -> "stat_us commit_us"
  local opts=(--nocache --nopassthrough --num-threads 2)
  [ "$1" = uring ] && opts+=(-o io_uring)
  "$hp" "${opts[@]}" "$src" "$mnt"
  for _ in $(seq 50); do mountpoint -q "$mnt" && break; sleep 0.1; done
  "$work/round_trips" "$mnt" "$ops" | awk '{print $2, $5}'
  fusermount3 -u "$mnt"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
: > "$work/plain"; : > "$work/uring"; : > "$work/direct"
for r in $(seq "$rounds"); do
  one plain >> "$work/plain"; one uring >> "$work/uring"
  "$work/round_trips" "$src" "$ops" | awk '{print $2, $5}' >> "$work/direct"
  echo "round $r: plain $(tail -1 "$work/plain")  uring $(tail -1 "$work/uring")  direct $(tail -1 "$work/direct") (us: stat commit64k)"
done
for f in plain uring direct; do
  s=$(cut -d' ' -f1 "$work/$f" | median) c=$(cut -d' ' -f2 "$work/$f" | median)
  eval "${f}_s=$s ${f}_c=$c"
  echo "$f: stat ${s} us, commit64k ${c} us (medians of $rounds)"
done
awk -v a="$plain_s" -v b="$uring_s" -v c="$plain_c" -v d="$uring_c" \
  'BEGIN {printf "uring speedup (plain/uring): stat %.2fx, commit64k %.2fx\n", a/b, c/d}'
