"""The ```python blocks of clients/python/README.md and docs/engine-integration.md run as written.

Every block must compile. Every block not preceded by `<!-- docs-test: not run (REASON) -->`
then runs, on its own, in a fresh namespace against a fresh gpucachefs (tests/daemon.py: tenant
acme) whose mountpoint replaces "/mnt/gpucache", the only substitution. Needs /dev/fuse and
GPUCACHE_BUILD_DIR, as the other mount tests.
"""

import os
import re
import unittest

from daemon import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = [os.path.join(HERE, "..", "README.md"),
        os.path.join(HERE, "..", "..", "..", "docs", "engine-integration.md")]
SKIP = re.compile(r"<!--\s*docs-test:\s*not run\s*\((.*)\)\s*-->")
MOUNT = "/mnt/gpucache"


def python_blocks(path):
    """(first line number, source, skip reason or None) of every ```python block of `path`."""
    with open(path) as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            before = next((l for l in reversed(lines[:i]) if l.strip()), "")
            skip = SKIP.search(before)
            end = lines.index("```", i + 1)
            blocks.append((i + 2, "\n".join(lines[i + 1:end]) + "\n", skip.group(1) if skip else None))
            i = end
        i += 1
    return blocks


class DocsExamplesTest(unittest.TestCase):
    def blocks(self):
        for path in DOCS:
            found = python_blocks(path)
            self.assertTrue(found, "%s: no ```python block (did the fences change?)" % path)
            name = os.path.relpath(path, os.path.join(HERE, "..", "..", ".."))
            for line, source, skip in found:
                yield "%s:%d" % (name, line), source, skip

    def test_every_block_compiles(self):
        for where, source, _ in self.blocks():
            with self.subTest(block=where):
                compile(source, where, "exec")

    def test_blocks_run_against_a_mount(self):
        ran = 0
        for where, source, skip in self.blocks():
            if skip:
                print("%s: not run: %s" % (where, skip))
                continue
            with self.subTest(block=where):
                daemon = Daemon()
                try:
                    code = compile(source.replace(MOUNT, daemon.mnt), where, "exec")
                    exec(code, {"__name__": "__docs__"})
                finally:
                    daemon.close()
                ran += 1
        self.assertGreater(ran, 0, "no block ran")


if __name__ == "__main__":
    unittest.main()
