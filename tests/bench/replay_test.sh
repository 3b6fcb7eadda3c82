#!/usr/bin/env bash
# gpucache-replay end to end: in-process and through real mounts must agree exactly for the
# policies whose decisions do not depend on hashing (prefix-tinylfu's count-min sketch hashes
# trace ids in-process and block paths in the store, so its collisions differ), and no policy
# may beat Belady.
set -euo pipefail
build=$1 trace=$2
mnt=$(mktemp -d /tmp/gpucache-replay-test-XXXXXX)
trap 'fusermount3 -u -z "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true' EXIT
exact=prefix-lru,lru,oldest
inproc=$("$build/gpucache-replay" "$trace" --capacities 0.1,0.3 2>/dev/null)
mount=$("$build/gpucache-replay" "$trace" --capacities 0.1,0.3 --policies "$exact" --mount "$mnt" 2>/dev/null)
sketch=$("$build/gpucache-replay" "$trace" --capacities 0.3 --policies prefix-tinylfu --mount "$mnt" 2>/dev/null)
echo "$inproc"
echo "$mount"
echo "$sketch"
[ "$(echo "$inproc" | wc -l)" -eq 8 ] || { echo "expected 8 lines (4 policies x 2 capacities)"; exit 1; }
strip() { sed -E 's/ mode=[a-z-]+//'; }
if [ "$(echo "$inproc" | grep -v tinylfu | strip)" != "$(echo "$mount" | strip)" ]; then
  echo "in-process and mount replays disagree"; exit 1
fi
printf '%s\n%s\n' "$inproc" "$sketch" | awk '{ split($3, h, "="); split($4, b, "="); if (h[2] > b[2] + 1e-9) { print "beats Belady: " $0; bad = 1 } } END { exit bad }'
echo "replay: 1 passed, 0 failed"
