#!/usr/bin/env bash
# Builds the libFuzzer targets with the release's clang (packaging/clang-version.sh; ASan +
# UBSan) in build-fuzz/, replays the committed seed corpora, then fuzzes each target for
# FUZZ_SECONDS (default 60). New inputs that libFuzzer finds go to build-fuzz/corpus/<target>,
# not into the source tree. Exit status non-zero on any crash, leak or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
packaging/install-deps.sh test
seconds=${FUZZ_SECONDS:-60}
clang=$(packaging/clang-version.sh)
CC=clang-$clang CXX=clang++-$clang cmake -S . -B build-fuzz -DGPUCACHE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_identity fuzz_block_header fuzz_control fuzz_config fuzz_manifest fuzz_index fuzz_commit_frame
passed=0
for target in identity block_header control config manifest index commit_frame; do
  seeds=tests/fuzz/corpus/$target
  work=build-fuzz/corpus/$target
  mkdir -p "$work"
  echo "fuzz_$target: replaying $(ls "$seeds" | wc -l) seeds, then fuzzing ${seconds}s"
  build-fuzz/tests/fuzz/fuzz_$target -runs=0 "$seeds" 2>&1 | tail -1
  build-fuzz/tests/fuzz/fuzz_$target -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    "$work" "$seeds" 2>&1 | tail -2
  passed=$((passed + 1))
done
echo "fuzz: $passed passed, 0 failed"
