#!/usr/bin/env bash
# The sanitizer jobs of the reliability suite (docs/reliability.md): the daemon and the load
# test built with AddressSanitizer + UndefinedBehaviorSanitizer, 16 writers and 16 readers for
# LOAD_SECONDS_ASAN (default 60) through a real mount; then with ThreadSanitizer for
# LOAD_SECONDS_TSAN (default 30). Any sanitizer report in the daemon's log, a wrong byte, or an
# unexpected error fails the job.
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh test

run() {  # build-dir sanitizers seconds
  local dir=$1 san=$2 secs=$3
  # Debug (-O0, asserts on): compiles faster than an optimized build, and asserts help here.
  cmake -S . -B "$dir" -DGPUCACHE_SANITIZE="$san" -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target gpucachefs load_tests
  echo "sanitize: $san, ${secs}s of load"
  # ThreadSanitizer needs the address layout it expects: no ASLR for the test or the daemon
  # it starts (the personality is inherited across fork and exec).
  GPUCACHE_LOAD_SECONDS=$secs \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  TSAN_OPTIONS=second_deadlock_stack=1 \
    setarch "$(uname -m)" -R "$dir/tests/load/load_tests"
}

run build-asan address,undefined "${LOAD_SECONDS_ASAN:-60}"
run build-tsan thread "${LOAD_SECONDS_TSAN:-30}"
echo "sanitize: passed"
