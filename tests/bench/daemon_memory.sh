#!/usr/bin/env bash
# Daemon resident memory per committed block (issue 15's "<= 128 B per block"), as root:
#   tests/bench/daemon_memory.sh [BUILD_DIR] [BLOCKS] [SCRATCH_DIR] [POLICY]
# (POLICY: the eviction policy the daemon runs, [limits] eviction_policy; the default's if
# omitted.)
# Populates a data directory with BLOCKS blocks through gpucache-index-bench (the FileStore,
# no FUSE), then starts gpucachefs on it and on an empty one, each until it is mounted and
# idle, and prints both resident sets and what the blocks add, per block:
#   case=daemon_rss_empty / daemon_rss_N   VmRSS (kB) of the mounted, idle daemon
#   case=daemon_rss_per_block              (rss_N - rss_empty) / N (B): what the index costs
#   case=daemon_rss_total_per_block        rss_N / N (B): gpucache-bench's resident_memory_per_block
# Each side may carry one of libfuse's 1 MiB receive buffers resident or not, by a race with
# glibc's mmap threshold (docs/performance.md, "Which start, which policy"): +-11 B per block
# at 100,000 blocks, +-1 B at 1,000,000. Hold the bound against BLOCKS=1000000 (~4 min).
set -euo pipefail
build=${1:-build} blocks=${2:-100000} scratch=${3:-/var/tmp} policy=${4:-}
work=$(mktemp -d "$scratch/gpucache-daemon-memory.XXXXXX")
trap 'fusermount3 -u -z "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/empty" "$work/mnt"
"$build/gpucache-index-bench" --phase populate --data "$work/full" --blocks "$blocks" >&2

# VmRSS (kB) of gpucachefs mounted on data directory $1, once mounted and idle.
rss_of() {
  cat > "$work/cfg.toml" <<CFG
data_dir = "$1"
[admins]
uids = [0]
[tenants.acme]
uids = [0, 1000]
[tenants.beta]
uids = [2000]
[metrics]
listen = ""
CFG
  if [ -n "$policy" ]; then printf '[limits]\neviction_policy = "%s"\n' "$policy" >> "$work/cfg.toml"; fi
  : > "$work/daemon.log"
  "$build/gpucachefs" "$work/cfg.toml" "$work/mnt" -f 2>>"$work/daemon.log" &
  local pid=$! i
  for i in $(seq 1200); do grep -q " $work/mnt " /proc/mounts && break; sleep 0.05; done
  ls "$work/mnt" >/dev/null
  # The files are checked in the background after the mount (adr/0016): measured once that
  # walk has finished and freed what it held.
  if grep -q "checked in the background)" "$work/daemon.log"; then
    for i in $(seq 1200); do grep -q "block files checked in the background in" "$work/daemon.log" && break; sleep 0.05; done
  fi
  sleep 1
  awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status"
  kill "$pid"
  wait "$pid" || true
}

empty=$(rss_of "$work/empty")
full=$(rss_of "$work/full")
echo "case=daemon_rss_empty gpucache=$empty unit=kB"
echo "case=daemon_rss_$blocks gpucache=$full unit=kB"
awk -v e="$empty" -v f="$full" -v n="$blocks" 'BEGIN {
  printf "case=daemon_rss_per_block gpucache=%.0f unit=B\n", (f - e) * 1024 / n
  printf "case=daemon_rss_total_per_block gpucache=%.0f unit=B\n", f * 1024 / n }'
