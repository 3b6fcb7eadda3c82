#!/usr/bin/python3
"""Runs the README's "Try it" commands and every `sh` block of docs/user-guide.md verbatim.

    docs_commands_test.py SOURCE_DIR BUILD_DIR

Both run, in order (the guide goes on from "Try it", as an operator reads them), as one
`bash -e` script in one fresh world: a private mount,
network and PID namespace (unshare) in which empty directories cover /mnt, /var/lib and /tmp,
`lo` is up (the default configuration serves metrics on 127.0.0.1:9110), the working directory
is a copy of the repository's layout (docs/, packaging/, clients/ and build/ bind-mounted from
the checkout and the build) and the build's bind mount is first on PATH. The host's /mnt/gpucache,
/var/lib/gpucache and /tmp are never touched, and when the script ends the PID namespace ends,
so no daemon and no mount outlive the test.

A block preceded by `<!-- docs-test: not run (REASON) -->` is skipped and reported. Fails if a
command fails (the trace shows which), or if a document yields no command to run.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

# `ip link set lo up` without iproute2 (not in a minimal Debian): SIOCGIFFLAGS, then
# SIOCSIFFLAGS with IFF_UP added, on the new network namespace's loopback.
LO_UP = ("python3 -c 'import fcntl, socket, struct; s = socket.socket(); "
         "f = struct.unpack(\"16sH\", fcntl.ioctl(s, 0x8913, struct.pack(\"16sH14x\", b\"lo\", 0))[:18])[1]; "
         "fcntl.ioctl(s, 0x8914, struct.pack(\"16sH14x\", b\"lo\", f | 1))'")
SKIP = re.compile(r"<!--\s*docs-test:\s*not run\s*\((.*)\)\s*-->")


def sh_blocks(text):
    """(lines, skip_reason or None) of every ```sh block of `text`, in order."""
    blocks, lines = [], text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            before = next((l for l in reversed(lines[:i]) if l.strip()), "")
            skip = SKIP.search(before)
            end = lines.index("```", i + 1)
            blocks.append((lines[i + 1:end], skip.group(1) if skip else None))
            i = end
        i += 1
    return blocks


def section(text, heading):
    """The text under `heading` up to the next heading of the same level."""
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1:]
    nxt = re.search(r"^## ", rest, re.M)
    return rest[:nxt.start()] if nxt else rest


def script_of(blocks, name):
    commands, skipped = [], []
    for lines, reason in blocks:
        if reason:
            skipped.append(reason)
            continue
        commands += [l for l in lines if l.strip() and not l.lstrip().startswith("#")]
    if not commands:
        sys.exit(f"FAIL: {name}: no command to run (did the sections or fences change?)")
    for reason in skipped:
        print(f"{name}: one block not run: {reason}")
    print(f"{name}: running {len(commands)} commands")
    return commands


def run_in_fresh_world(src, build, commands, name):
    with tempfile.TemporaryDirectory(prefix="gpucache-docs-") as t:
        for d in ("mnt", "varlib", "tmp/work"):
            os.makedirs(os.path.join(t, d))
        binds = [(os.path.join(src, d), d) for d in ("docs", "packaging", "clients")]
        binds.append((build, "build"))
        setup = ["set -e", "mount --make-rprivate /", LO_UP]
        for source, d in binds:
            target = os.path.join(t, "tmp/work", d)
            os.makedirs(target)
            setup.append(f"mount --bind {shlex.quote(source)} {shlex.quote(target)}")
        setup += [f"mount --bind {shlex.quote(t)}/mnt /mnt",
                  f"mount --bind {shlex.quote(t)}/varlib /var/lib",
                  f"mount --rbind {shlex.quote(t)}/tmp /tmp",
                  "cd /tmp/work",
                  # The bind mount, not BUILD_DIR: a build directory under /tmp is covered.
                  "export PATH=/tmp/work/build:$PATH",
                  "set -x -o pipefail"]
        script = os.path.join(t, "tmp", "commands.sh")
        with open(script, "w") as f:
            f.write("\n".join(setup + commands) + "\n")
        # The script is read before /tmp is covered: bash opens it once, by its host path.
        rc = subprocess.call(["unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc",
                              "bash", script])
        if rc != 0:
            sys.exit(f"FAIL: {name}: a command exited {rc} (the last '+' line above)")
        print(f"{name}: every command succeeded")


def main():
    src, build = (os.path.abspath(p) for p in sys.argv[1:3])
    if os.geteuid() != 0:
        print("SKIP: needs root (FUSE mounts and namespaces)")
        sys.exit(77)
    with open(os.path.join(src, "README.md")) as f:
        readme = section(f.read(), "## Try it")
    with open(os.path.join(src, "docs/user-guide.md")) as f:
        guide = f.read()
    # In order, in one world, as a new operator reads them: the guide goes on from "Try it".
    commands = script_of(sh_blocks(readme), "README.md, Try it") + \
        script_of(sh_blocks(guide), "docs/user-guide.md")
    run_in_fresh_world(src, build, commands, "README.md's Try it, then docs/user-guide.md")


if __name__ == "__main__":
    main()
