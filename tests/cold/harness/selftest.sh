#!/usr/bin/env bash
# Proves the cold-tier S3 harness works on this machine: a real gateway (rgw.sh), the fault
# proxy in front of it, and boto3 (s3_check.py) going through the proxy.
#   1. rgw.sh start (which makes the bucket gpucache-test)
#   2. fault_proxy.py at fault rate 0: put a 2 MiB object (with Expect: 100-continue, as
#      libcurl sends for large bodies), get it back, list it, all through the proxy; then read
#      it from rgw directly; the proxy's log must show those requests, forwarded, no fault
#   3. fault_proxy.py at fault rate 1 with only "500": a get fails with InternalError and the
#      log says the upstream never saw it
#   4. everything stopped (also on failure, by the EXIT trap)
# Exit 0 only if all of that held. Needs the packages of packaging/install-deps.sh test.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3 # Debian's python3-boto3 lives there, not in a pyenv/venv python3
t0=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucache-cold-selftest.XXXXXX")
proxy_pid=

stop_proxy() {
  if [[ -n $proxy_pid ]]; then
    kill -TERM "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    proxy_pid=
  fi
}
cleanup() {
  local rc=$?
  stop_proxy
  "$here/rgw.sh" stop "$work/rgw" || true
  if ((rc)); then
    echo "selftest: FAILED (exit $rc); logs kept in $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
# bash runs no EXIT trap when a signal kills it: turn them into exits
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM
fail() { echo "selftest: $*" >&2; exit 1; }

# start_proxy RATE FAULTS LOG: runs the proxy in front of the gateway and writes
# $work/proxy.env, the gateway's env with the endpoint pointing at the proxy.
start_proxy() {
  local port_file=$work/proxy.port i
  rm -f "$port_file"
  "$PY" "$here/fault_proxy.py" --listen-port-file "$port_file" --upstream "$GPUCACHE_S3_ENDPOINT" \
    --fault-rate "$1" --faults "$2" --seed 1 --log "$3" 2>>"$work/proxy.stderr" &
  proxy_pid=$!
  for ((i = 0; i < 100; i++)); do
    [[ -s $port_file ]] && break
    kill -0 "$proxy_pid" 2>/dev/null || fail "fault_proxy.py exited: $(cat "$work/proxy.stderr")"
    sleep 0.1
  done
  [[ -s $port_file ]] || fail "fault_proxy.py wrote no port in 10 s"
  sed "s|^GPUCACHE_S3_ENDPOINT=.*|GPUCACHE_S3_ENDPOINT=http://127.0.0.1:$(<"$port_file")|" \
    "$work/rgw/env" >"$work/proxy.env"
}

"$here/rgw.sh" start "$work/rgw"
set -a
# shellcheck source=/dev/null
. "$work/rgw/env"
set +a

# 2. Fault rate 0: everything goes through unchanged.
start_proxy 0 500,503,slowdown,reset,stall,truncate "$work/proxy0.log"
head -c $((2 << 20)) /dev/urandom >"$work/obj.in"
s3() { "$PY" "$here/s3_check.py" "$@"; }
s3 --env "$work/proxy.env" put selftest/obj "$work/obj.in"
s3 --env "$work/proxy.env" get selftest/obj "$work/obj.proxy"
cmp -s "$work/obj.in" "$work/obj.proxy" || fail "object read through the proxy differs"
[[ $(s3 --env "$work/proxy.env" list selftest/) == selftest/obj ]] || fail "list through the proxy"
s3 --env "$work/rgw/env" get selftest/obj "$work/obj.direct"
cmp -s "$work/obj.in" "$work/obj.direct" || fail "object read from rgw directly differs"
stop_proxy
"$PY" - "$work/proxy0.log" <<'EOF' || fail "proxy log check (rate 0)"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["method"], e["fault"], e["forwarded"], e["status"]) for e in log]
want = [("PUT", None, True, 200), ("GET", None, True, 200), ("GET", None, True, 200)]
assert got == want, f"proxy log: {got}, want {want}"
assert log[0]["path"] == "/gpucache-test/selftest/obj", log[0]["path"]
EOF

# 3. Fault rate 1, only 500: the error reaches the client and the upstream is not asked.
start_proxy 1 500 "$work/proxy1.log"
if s3 --env "$work/proxy.env" get selftest/obj "$work/obj.fault" 2>"$work/fault.err"; then
  fail "a get through a proxy injecting 500 succeeded"
fi
grep -q InternalError "$work/fault.err" || fail "expected InternalError, got: $(cat "$work/fault.err")"
stop_proxy
"$PY" - "$work/proxy1.log" <<'EOF' || fail "proxy log check (rate 1)"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
assert [(e["fault"], e["forwarded"], e["status"]) for e in log] == [("500", False, 500)], log
EOF

echo "selftest: passed in $((SECONDS - t0)) s"
