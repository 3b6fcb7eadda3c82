#!/usr/bin/env bash
# A throw-away Ceph RADOS Gateway (real S3) on 127.0.0.1 for the cold-tier tests.
#   rgw.sh start DIR   one monitor, one memstore OSD and radosgw, all under DIR; writes DIR/env
#   rgw.sh stop DIR    ends what start started (idempotent)
# Nothing lives outside DIR (no /etc/ceph, /var/lib/ceph, /var/log/ceph), ports are picked free
# at start, so runs with different DIRs can go on side by side. See README.md for the interface.
# Env: RGW_MEMSTORE_BYTES (default 4 GiB) caps the OSD's in-memory store (RAM is only used as
# objects are written; a full OSD makes writes hang, not fail); RGW_START_TIMEOUT (default 90)
# is how long start waits for the gateway.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Debian's python3-boto3 is installed for /usr/bin/python3, not for whatever python3 is first
# on PATH (pyenv and venvs are common on developer machines).
PY=/usr/bin/python3
BUCKET=gpucache-test
# Fixed keys: the cluster is private to one test run and bound to loopback, so nothing is
# gained by random ones, and fixed ones make failures easy to reproduce by hand.
ACCESS_KEY=GPUCACHETESTACCESS01
SECRET_KEY=gpucacheTestSecretKey0000000000000000000
# rgw does not check the region in a SigV4 credential scope against its zonegroup (any string
# verifies), so use the one every S3 client defaults to. With us-east-1, boto3 sends no
# LocationConstraint on CreateBucket, which rgw would reject unless it named the zonegroup.
REGION=us-east-1
DAEMONS=(mon osd rgw)

usage() { echo "usage: $0 start|stop DIR" >&2; exit 64; }
(($# == 2)) || usage
cmd=$1
[[ $cmd == stop && ! -d $2 ]] && exit 0 # nothing was started there
mkdir -p "$2"
dir=$(cd "$2" && pwd) # absolute: ceph.conf paths and the pid checks below need it
conf=$dir/ceph.conf

# The pid in DIR/run/NAME.pid if that process is alive and still ours (its command line names
# this DIR's ceph.conf), so a recycled pid is never signalled.
live_pid() {
  local f=$dir/run/$1.pid pid cmdline
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ " $cmdline" == *" $conf "* ]] || return 1
  echo "$pid"
}

# True while any of the pids runs. A zombie whose threads have all exited counts as gone: its
# ports and memory are free, and only the reaping is left, which PID 1 on some VMs does 1-2 s
# late (and which nobody does for start's own children until it exits). A zombie main thread
# with other threads still exiting (a killed multi-threaded daemon) is not gone yet.
any_alive() {
  local pid stat tasks
  for pid; do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    stat=${stat##*) } # "pid (comm) S ppid ...": drop up to the comm, which may hold spaces
    [[ $stat == Z* ]] || return 0
    tasks=("/proc/$pid/task/"*)
    ((${#tasks[@]} <= 1)) || return 0
  done
  return 1
}

# Ends the named daemons with signal $2 (TERM lets them flush their logs), then SIGKILL after
# $1 seconds, and waits until they are gone.
end_daemons() {
  local secs=$1 sig=$2 pids=() n pid i
  shift 2
  for n; do
    pid=$(live_pid "$n") && pids+=("$pid")
  done
  if ((${#pids[@]})); then
    kill "-$sig" "${pids[@]}" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
      any_alive "${pids[@]}" || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
    while any_alive "${pids[@]}"; do sleep 0.05; done
  fi
  for n; do rm -f "$dir/run/$n.pid"; done
}

# The gateway first: it hangs in shutdown (until SIGKILL) when the OSD or the monitor goes away
# under it. Then the OSD and the monitor together: the OSD does not wait for the monitor (see
# "osd fast shutdown notify mon"), and the data is scratch. About 0.7 s in all.
stop() {
  end_daemons 5 TERM rgw
  end_daemons 5 TERM osd mon
}

# Logs to show when start fails.
show_logs() {
  local f
  for f in "$dir"/log/*; do
    [[ -f $f ]] || continue
    echo "----- tail $f" >&2
    tail -n 25 "$f" >&2
  done
}

free_ports() { # two distinct free TCP ports on 127.0.0.1
  "$PY" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])'
}

# Runs a daemon in the foreground (-f) in the background, so $! is its own pid: no pid file
# race with a daemonizing fork, and a daemon that dies at once is still seen. Its stdio goes to
# a file so a caller capturing our output (subprocess, $(...)) is not kept waiting on the pipe.
spawn() {
  local name=$1
  shift
  "$@" -c "$conf" -f >>"$dir/log/$name.stdout" 2>&1 </dev/null &
  echo $! >"$dir/run/$name.pid"
}

# start's EXIT trap until it succeeds: leave nothing running and no env file behind.
start_failed() {
  local rc=$?
  ((rc)) || return 0
  echo "rgw.sh: start failed (exit $rc)" >&2
  show_logs
  stop
  rm -f "$dir/env"
}

ceph_cli() { timeout 30 ceph -c "$conf" --connect-timeout 20 "$@"; }

start() {
  local t0 mon_port rgw_port fsid osd_uuid osd_id pid n deadline
  t0=$(date +%s.%N)
  for n in "${DAEMONS[@]}"; do
    if pid=$(live_pid "$n"); then
      echo "rgw.sh: $dir already runs $n (pid $pid); stop it first" >&2
      exit 1
    fi
  done
  # A fresh cluster each time: a memstore OSD keeps nothing worth reusing.
  rm -rf "$dir"/{ceph.conf,monmap,env,mon,osd,run,log,rgw,crash}
  mkdir -p "$dir"/{mon,osd,run,log,rgw,crash}
  trap start_failed EXIT
  # bash runs no EXIT trap when a signal kills it: turn them into exits
  trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM

  read -r mon_port rgw_port < <(free_ports)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  # Why each setting:
  # - auth none everywhere: no keyrings to make; loopback-only throw-away cluster.
  # - ms mon client mode = crc secure: with auth none, the gateway otherwise loops on an auth
  #   error talking to the monitor.
  # - size 1 pools, chooseleaf type 0, pool size one allowed: a single OSD must be able to
  #   take every placement group; small pg counts and a raised per-OSD cap because radosgw
  #   makes 7+ pools. The autoscaler off: with it, Ceph 18 (Debian 13) creates a pool the
  #   gateway names without a count with pg_num 1, below the default pgp_num of 8, and the
  #   monitor refuses it (ERANGE; radosgw exits).
  # - memstore: the OSD keeps objects in RAM; no disk format, starts in a second. Its cap is
  #   generous because a full OSD blocks writes (the client hangs) rather than failing them.
  # - every path under DIR, including the cluster log the monitor writes to /var/log/ceph by
  #   default and the admin sockets in /var/run/ceph.
  # - paxos propose interval/min wait: the monitor commits a map change at most once a second
  #   by default, and radosgw's 7 pools take ~15 map epochs: start takes 15 s instead of 4.
  # - osd fast shutdown notify mon = false: else a stopping OSD waits 5 s for the monitor,
  #   which stop is ending at the same time.
  # - mon data avail: the monitor refuses to run below 5% free disk by default; tests should
  #   not fail on a full-ish developer disk for that.
  # - osd class dir: Ceph 18 (Debian 13) defaults to a relative "lib/<arch>/rados-classes",
  #   which the OSD resolves against its working directory; the gateway's calls into the
  #   object classes then fail (EOPNOTSUPP) and it exits. The installed directory, named.
  local class_dir
  class_dir=$(dirname "$(ls /usr/lib/*/rados-classes/libcls_version.so /usr/lib/rados-classes/libcls_version.so 2>/dev/null | head -1)")
  cat >"$conf" <<EOF
[global]
osd class dir = $class_dir
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc secure
mon warn on insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
paxos propose interval = 0.1
paxos min wait = 0.01
osd objectstore = memstore
osd fast shutdown notify mon = false
memstore device bytes = ${RGW_MEMSTORE_BYTES:-4294967296}
mon data avail warn = 2
mon data avail crit = 1
run dir = $dir/run
crash dir = $dir/crash
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
mon cluster log file = default=$dir/log/ceph.\$channel.log cluster=$dir/log/ceph.log
mon data = $dir/mon/\$name
osd data = $dir/osd/\$name
keyring = $dir/keyring
[client.rgw.gw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port tcp_nodelay=1
rgw data = $dir/rgw
EOF

  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon -c "$conf" -i a --mkfs --monmap "$dir/monmap" >>"$dir/log/mkfs.log" 2>&1
  spawn mon ceph-mon -i a

  # The OSD: register it with the monitor (which assigns id 0), then format its memstore.
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  osd_id=$(ceph_cli osd new "$osd_uuid")
  mkdir -p "$dir/osd/osd.$osd_id"
  ceph-osd -c "$conf" -i "$osd_id" --mkfs --osd-uuid "$osd_uuid" >>"$dir/log/mkfs.log" 2>&1
  spawn osd ceph-osd -i "$osd_id"

  spawn rgw radosgw -n client.rgw.gw

  # The gateway answers an anonymous GET / (ListAllMyBuckets, 200) once its pools exist.
  deadline=$((SECONDS + ${RGW_START_TIMEOUT:-90}))
  until curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$rgw_port/"; do
    for n in "${DAEMONS[@]}"; do
      live_pid "$n" >/dev/null || { echo "rgw.sh: $n exited during start" >&2; exit 1; }
    done
    ((SECONDS < deadline)) || { echo "rgw.sh: gateway not answering after ${RGW_START_TIMEOUT:-90} s" >&2; exit 1; }
    sleep 0.5
  done

  timeout 30 radosgw-admin -c "$conf" user create --uid gpucache-test --display-name "gpucache test" \
    --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" >>"$dir/log/user-create.log" 2>&1

  cat >"$dir/env" <<EOF
GPUCACHE_S3_ENDPOINT=http://127.0.0.1:$rgw_port
GPUCACHE_S3_BUCKET=$BUCKET
GPUCACHE_S3_REGION=$REGION
GPUCACHE_S3_ACCESS_KEY=$ACCESS_KEY
GPUCACHE_S3_SECRET_KEY=$SECRET_KEY
EOF
  "$PY" "$here/s3_check.py" --env "$dir/env" create-bucket "$BUCKET"
  trap - EXIT HUP INT TERM
  echo "rgw.sh: started in $("$PY" -c "import time; print(f'{time.time() - $t0:.1f}')") s: http://127.0.0.1:$rgw_port (env in $dir/env)"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
