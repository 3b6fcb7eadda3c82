#!/usr/bin/env python3
"""Every repository path the documentation names exists.

Checks README.md, docs/*.md and adr/*.md: each `code span` or link target that looks like a
path of this repository (it starts with one of its top-level folders, or names a document
relative to the file) must exist; and README.md's layout table has a row for every top-level
folder. A span with a placeholder (<...>, *, {a,b}) is skipped, and
`name.{h,cc}` is read as both files. Run: docs_paths_test.py SOURCE_DIR.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
top = {p.name for p in root.iterdir()
       if p.is_dir() and not p.name.startswith(".") and not p.name.startswith("build")}
spans = re.compile(r"`([^`\s]+)`|\]\(([^)\s#]+)")


def candidates(token):
    """The paths a token names: `a.{h,cc}` names two."""
    m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", token)
    if not m:
        return [token]
    return [m.group(1) + alt + m.group(3) for alt in m.group(2).split(",")]


def is_repo_path(token):
    if any(c in token for c in "<>*$") or "://" in token:
        return False
    first = token.split("/", 1)[0]
    if first in top and "/" in token:
        return True
    return token.startswith("../") or (token.endswith(".md") and "/" not in token)


missing = []
docs = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "adr").glob("*.md"))]
for doc in docs:
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        for m in spans.finditer(line):
            token = (m.group(1) or m.group(2)).rstrip(".,:;")
            if not is_repo_path(token):
                continue
            for path in candidates(token):
                here = (doc.parent / path) if not path.split("/", 1)[0] in top else root / path
                if not (here.exists() or (root / path).exists()):
                    missing.append(f"{doc.relative_to(root)}:{n}: {path}")
readme_rows = [line for line in (root / "README.md").read_text().splitlines() if line.startswith("| `")]
for folder in sorted(top):
    if not any(f"`{folder}/`" in row for row in readme_rows):
        missing.append(f"README.md: the layout table has no row for {folder}/")
print("\n".join(missing))
print(f"{len(missing)} missing path(s) in {len(docs)} documents")
sys.exit(1 if missing else 0)
