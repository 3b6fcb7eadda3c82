#!/usr/bin/python3
"""`pip install ./clients/python` into a fresh venv, then `import gpucache` from elsewhere.

    pip_install_test.py SOURCE_DIR BUILD_DIR VERSION

Offline: the venv (BUILD_DIR/pip-install-test, remade each run) sees Debian's dist-packages
(--system-site-packages), so python3-xxhash, -cbor2 and -numpy satisfy the dependencies and
python3-setuptools builds the package (--no-build-isolation --no-index). The package is built
from a copy of clients/python, so no build/ or *.egg-info is left in the source tree. Checks:
the installed distribution's version and gpucache.__version__ are VERSION (the CMake project
version), py.typed is installed, `import gpucache` imports no torch, gpucache.GpucacheConnector
is the connector, and the module comes from the venv, not the source tree. Then the same
import once more with torch made unimportable, as in a fresh venv without the [torch] or
[vllm] extras (this venv sees Debian's python3-torch, which hid that case: `print(
gpucache.GpucacheConnector)` failed with "No module named 'torch'" after a plain
`pip install ./clients/python`).
"""
import os
import shutil
import subprocess
import sys

CHECK = r"""
import importlib.metadata, os, sys
import gpucache
assert "torch" not in sys.modules, "import gpucache imported torch"
print(gpucache.GpucacheConnector, gpucache.__version__)
from gpucache.vllm_connector import GpucacheConnector
assert gpucache.GpucacheConnector is GpucacheConnector
expected, venv = sys.argv[1], sys.argv[2]
assert gpucache.__version__ == expected, (gpucache.__version__, expected)
assert importlib.metadata.version("gpucache") == expected, importlib.metadata.version("gpucache")
package = os.path.dirname(os.path.realpath(gpucache.__file__))
assert package.startswith(os.path.realpath(venv) + os.sep), package
assert os.path.isfile(os.path.join(package, "py.typed")), "py.typed is not installed"
print("installed in", package)
"""

# A finder ahead of every other that refuses torch, as an interpreter without it would.
WITHOUT_TORCH = r"""
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
sys.meta_path.insert(0, NoTorch())
import gpucache
print(gpucache.GpucacheConnector)
assert gpucache.GpucacheConnector.__name__ == "GpucacheConnector"
assert "torch" not in sys.modules
"""


def run(*args, **kw):
    print("+", " ".join(a if "\n" not in a else "CHECK" for a in args), flush=True)
    subprocess.run(args, check=True, **kw)


def main():
    src, build = (os.path.abspath(p) for p in sys.argv[1:3])
    version = sys.argv[3]
    root = os.path.join(build, "pip-install-test")
    shutil.rmtree(root, ignore_errors=True)
    venv, copy = os.path.join(root, "venv"), os.path.join(root, "src")
    shutil.copytree(os.path.join(src, "clients", "python"), copy,
                    ignore=shutil.ignore_patterns("tests", "examples", "build", "*.egg-info", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_ROOT_USER_ACTION="ignore", PIP_NO_INPUT="1")
    run(sys.executable, "-m", "venv", "--system-site-packages", venv, env=env)
    python = os.path.join(venv, "bin", "python")
    run(python, "-m", "pip", "install", "--quiet", "--no-index", "--no-build-isolation", copy, env=env)
    # From a directory with no gpucache in it: the import must find the installed package.
    run(python, "-c", CHECK, version, venv, env=env, cwd=root)
    run(python, "-c", WITHOUT_TORCH, env=env, cwd=root)
    print("PASS: pip install ./clients/python, then import gpucache", version)


if __name__ == "__main__":
    main()
