#!/usr/bin/env bash
# Builds the store, fs and cold libraries with the release's clang (packaging/clang-version.sh)
# and -Wthread-safety as errors, in build-thread-safety/: the GUARDED_BY/REQUIRES annotations
# (store/thread_annotations.h, on the Mutex of store/mutex.h) are checked on every build of CI.
# Only the libraries are built (not the tests) to keep it quick.
set -euo pipefail
cd "$(dirname "$0")/.."
clang=$(packaging/clang-version.sh)
CC=clang-$clang CXX=clang++-$clang cmake -S . -B build-thread-safety -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" >/dev/null
cmake --build build-thread-safety -j"$(nproc)" --target gpucache_store gpucache_fs gpucache_cold
echo "thread safety: gpucache_store, gpucache_fs and gpucache_cold pass -Wthread-safety"
