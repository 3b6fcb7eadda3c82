#!/usr/bin/env bash
# gpucache-replay end to end: in-process and through real mounts must agree exactly for every
# policy but prefix-tinylfu (the in-process replay gives each block the key the store gives
# it, so policies that hash keys decide alike too; but prefix-tinylfu also counts misses, and
# the store sees a miss at each negative lookup, the probe's and the rename's, where the replay
# counts one), and no policy may beat Belady or the time bound.
set -euo pipefail
build=$1 trace=$2
mnt=$(mktemp -d /tmp/gpucache-replay-test-XXXXXX)
trap 'fusermount3 -u -z "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true' EXIT
inproc=$("$build/gpucache-replay" "$trace" --capacities 0.1,0.3 2>/dev/null)
policies=$(echo "$inproc" | sed -E 's/^policy=([a-z-]+) .*/\1/' | awk '!seen[$0]++')
exact=$(echo "$policies" | grep -vx prefix-tinylfu | paste -sd, -)
mount=$("$build/gpucache-replay" "$trace" --capacities 0.1,0.3 --policies "$exact" --mount "$mnt" 2>/dev/null)
sketch=$("$build/gpucache-replay" "$trace" --capacities 0.3 --policies prefix-tinylfu --mount "$mnt" 2>/dev/null)
echo "$inproc"
echo "$mount"
echo "$sketch"
n=$(echo "$policies" | wc -l)
[ "$n" -ge 4 ] || { echo "expected every policy, got $n"; exit 1; }
[ "$(echo "$inproc" | wc -l)" -eq $((n * 2)) ] || { echo "expected $n policies x 2 capacities"; exit 1; }
strip() { sed -E 's/ mode=[a-z-]+//'; }
if [ "$(echo "$inproc" | grep -v tinylfu | strip)" != "$(echo "$mount" | strip)" ]; then
  echo "in-process and mount replays disagree"; exit 1
fi
# A longer generated trace, for the policies that keep state beyond the resident blocks
# (prefix-reuse's sketch of blocks seen and its sampled ghosts): it only shows once blocks are
# evicted and come back, which the small trace above hardly does.
learned_in=$("$build/gpucache-replay" gen:multi-turn --limit 400 --capacities 0.2 --policies prefix-reuse 2>/dev/null)
learned_mount=$("$build/gpucache-replay" gen:multi-turn --limit 400 --capacities 0.2 --policies prefix-reuse --mount "$mnt" 2>/dev/null)
echo "$learned_in"
echo "$learned_mount"
if [ "$(echo "$learned_in" | strip)" != "$(echo "$learned_mount" | strip)" ]; then
  echo "in-process and mount replays of gen:multi-turn disagree"; exit 1
fi
printf '%s\n%s\n' "$inproc" "$sketch" | awk '{ split($3, h, "="); split($4, b, "="); split($10, t, "=");
  if (h[2] > b[2] + 1e-9 || h[2] > t[2] + 1e-9) { print "beats a bound: " $0; bad = 1 } } END { exit bad }'
echo "replay: 1 passed, 0 failed"
