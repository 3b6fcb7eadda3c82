"""The Python client against a real gpucachefs mount and the C++ gpucache-client.

Skipped unless GPUCACHE_BUILD_DIR names a build directory holding `gpucachefs` and
`gpucache-client`. Needs /dev/fuse and permission to mount (root, or fusermount3).
Each test gets a fresh daemon, data directory and mountpoint.
"""

import errno
import json
import os
import random
import signal
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from daemon import BUILD_DIR, Daemon
from gpucache import CacheIdentity, MountClient, Multimodal
from gpucache.client import IDENTITY_XATTR

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "..", "..", "..", "tests", "vectors", "identity.json")


def _toml(identity):
    """The identity as an identity file for gpucache-client (clients/cpp/identity_file.h)."""
    j = identity.to_json()
    mm = j.pop("multimodal", None)
    lines = []
    for k, v in j.items():
        # JSON strings and arrays of strings are valid TOML basic strings / arrays (ASCII).
        lines.append("%s = %s" % (k, json.dumps(v)))
    if mm is not None:  # a table must follow every top-level key
        lines.append("[multimodal]")
        lines += ["%s = %s" % (k, json.dumps(v)) for k, v in mm.items()]
    return "\n".join(lines) + "\n"


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class MountInteropTest(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon()  # fresh data directory and mountpoint (tests/daemon.py)
        self.tmp, self.mnt = self.daemon.tmp, self.daemon.mnt
        self.client = MountClient(self.mnt)
        self.rng = random.Random(self.id())  # reproducible per test
        with open(VECTORS) as f:
            self.base = CacheIdentity.from_json(json.load(f)[0]["identity"])
        self.assertEqual(self.base.tenant, "acme")

    def tearDown(self):
        self.daemon.close()

    # ---- helpers ----

    def hash(self):
        return self.rng.randbytes(16)

    def settled_op_count(self, op):
        """op_count once it stopped moving: the daemon counts a request after its reply."""
        last = self.op_count(op)
        while True:
            time.sleep(0.05)
            now = self.op_count(op)
            if now == last:
                return now
            last = now

    def op_count(self, op):
        """FUSE requests of kind `op` the daemon has answered (its own metrics)."""
        series = 'gpucache_fuse_op_seconds_count{op="%s"} ' % op
        with open(os.path.join(self.mnt, ".gpucache", "metrics")) as f:
            for line in f:
                if line.startswith(series):
                    return float(line[len(series):])
        return 0.0

    def identity(self, chain, **changes):
        return self.base.replace(chain=chain, **changes)

    def write_toml(self, identity, name="identity.toml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(_toml(identity))
        return path

    def cpp_client(self, *args):
        return subprocess.run([os.path.join(BUILD_DIR, "gpucache-client"), *args],
                              capture_output=True, timeout=30)

    # ---- tests ----

    def test_python_commit_cpp_get(self):
        ident = self.identity([self.hash(), self.hash()])
        payload = self.rng.randbytes(300 * 1024)
        self.client.commit(ident, payload)
        out = os.path.join(self.tmp, "out.bin")
        r = self.cpp_client("get", self.mnt, self.write_toml(ident), out)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        with open(out, "rb") as f:
            self.assertEqual(f.read(), payload)
        # The committed file carries the canonical identity as its xattr.
        self.assertEqual(os.getxattr(self.client.path_of(ident), "user.gpucache.identity"),
                         ident.encode_physical_key())

    def test_cpp_get_to_an_unwritable_path_says_why(self):
        # Issue 13, defect 8: it exited 2 with no message.
        ident = self.identity([self.hash(), self.hash()])
        self.client.commit(ident, b"kv" * 100)
        out = os.path.join(self.tmp, "no-such-dir", "out.bin")
        r = self.cpp_client("get", self.mnt, self.write_toml(ident), out)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"cannot write " + out.encode(), r.stderr)
        self.assertIn(b"No such file or directory", r.stderr)
        r = subprocess.run([os.path.join(BUILD_DIR, "gpucache-client"), "get", self.mnt,
                            self.write_toml(ident)], stdout=open("/dev/full", "wb"),
                           stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"cannot write standard output", r.stderr)

    def test_cpp_put_python_read(self):
        # Multimodal and an adapter: exercises the [multimodal] table of the C++ identity file.
        ident = self.identity([self.hash(), self.hash()], adapter="lora:x@1", valid_length=100,
                              multimodal=Multimodal("qwen2-vl-processor@7", self.rng.randbytes(32)))
        payload = self.rng.randbytes(123457)
        src = os.path.join(self.tmp, "in.bin")
        with open(src, "wb") as f:
            f.write(payload)
        r = self.cpp_client("put", self.mnt, self.write_toml(ident), src)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        # Both clients name the block the same way.
        self.assertEqual(r.stdout.decode().strip(), self.client.path_of(ident))
        self.assertEqual(self.client.read(ident), payload)

    def test_probe_prefix(self):
        blocks, parent = [], self.hash()
        for _ in range(4):
            units = [self.hash() for _ in range(3)]
            blocks.append(self.identity([parent] + units))
            parent = units[-1]  # the next block's parent commits to everything before it
        self.assertEqual(self.client.probe_prefix(blocks), 0)
        for b in (blocks[0], blocks[1], blocks[3]):  # a hole at 2 ends the prefix
            self.client.commit(b, self.rng.randbytes(4096))
        self.assertEqual(self.client.probe_prefix(blocks), 2)
        with self.assertRaises(FileNotFoundError):
            self.client.read(blocks[2])

    def test_lookup(self):
        parent = self.hash()
        stored = self.identity([parent, self.hash()], valid_length=16)
        self.client.commit(stored, b"kv" * 1000)

        hit = self.client.lookup(stored)
        self.assertEqual(hit["ok"], True, hit)
        self.assertEqual(hit["result"], "hit", hit)
        self.assertEqual(hit["path"], stored.relative_path())

        longer = self.identity(stored.chain + [self.hash()], valid_length=32)
        prefix = self.client.lookup(longer)
        self.assertEqual(prefix["result"], "prefix_hit", prefix)
        self.assertEqual(prefix["path"], stored.relative_path())
        self.assertEqual(prefix["valid_length"], 16)

        other_dtype = stored.replace(kv_dtype="fp8_e4m3")
        miss = self.client.lookup(other_dtype)
        self.assertEqual((miss["result"], miss["reason"]), ("miss", "incompatible"), miss)

        absent = self.client.lookup(self.identity([self.hash()]))
        self.assertEqual((absent["result"], absent["reason"]), ("miss", "absent"), absent)

    def test_commit_twice_is_eexist_and_leaves_no_part(self):
        ident = self.identity([self.hash()])
        self.client.commit(ident, b"first")
        with self.assertRaises(FileExistsError):
            self.client.commit(ident, b"second")
        self.assertEqual(self.client.read(ident), b"first")
        self.assertEqual(os.listdir(os.path.dirname(self.client.path_of(ident))),
                         [ident.block_name()])

    def test_failed_commit_removes_part_and_releases_block(self):
        ident = self.identity([self.hash()])
        with self.assertRaises(TypeError):  # fails after the create: not a buffer
            self.client.commit_by_rename(ident, 12345)
        directory = os.path.dirname(self.client.path_of(ident))
        self.assertEqual(os.listdir(directory), [])
        self.client.commit(ident, b"retry")  # the abandoned reservation is gone
        self.assertEqual(self.client.read(ident), b"retry")

    def test_commit_is_one_frame_through_the_commit_channel(self):
        first = self.identity([self.hash()])
        self.client.commit(first, b"makes the namespace")  # a frame, ENOENT, mkdir, the frame again
        ident = self.identity([self.hash()])
        renames, writes = self.settled_op_count("rename"), self.settled_op_count("write")
        payload = [b"k" * 70000, memoryview(b"v" * 70000), bytearray(b"pad")]
        self.client.commit(ident, payload)  # a list of buffers: one frame
        self.assertEqual(self.client.read(ident), b"".join(bytes(b) for b in payload))
        self.assertEqual(self.settled_op_count("rename"), renames)
        self.assertEqual(self.settled_op_count("write"), writes + 1)
        with self.assertRaises(FileExistsError):
            self.client.commit(ident, b"second")
        with self.assertRaises(TypeError):  # not a buffer: refused before the mount is touched
            self.client.commit(self.identity([self.hash()]), 12345)
        self.assertEqual(sorted(os.listdir(os.path.dirname(self.client.path_of(ident)))),
                         sorted([first.block_name(), ident.block_name()]))

    def test_commit_channel_is_used_again_after_the_daemon_restarts(self):
        # Found by review: one ENOENT from opening the channel (no daemon mounted during a
        # restart) made the client use the rename for the rest of its life.
        self.client.commit(self.identity([self.hash()]), b"before")
        self.daemon.proc.send_signal(signal.SIGTERM)
        self.daemon.proc.wait(timeout=10)
        with self.assertRaises(OSError) as stopped:  # no daemon: refused, not written locally
            self.client.commit(self.identity([self.hash()]), b"while stopped")
        self.assertEqual(stopped.exception.errno, errno.ENOTCONN)
        self.daemon.start()
        ident = self.identity([self.hash()])
        self.client.commit(ident, b"after")
        self.assertEqual(self.client.read(ident), b"after")
        self.assertEqual(self.settled_op_count("rename"), 0)
        self.assertEqual(self.settled_op_count("write"), 1)

    # Regression (review, 2026-12-07): with no gpucachefs mounted but <mount>/<tenant>/ there,
    # commit fell back to commit-by-rename on the plain directory and read served the file
    # back: no checksums, eviction or tenancy, and anyone able to write there planted blocks.
    def test_a_plain_directory_is_refused_unless_opted_in(self):
        with tempfile.TemporaryDirectory() as plain:
            ident = self.identity([self.hash()])
            os.mkdir(os.path.join(plain, ident.tenant))
            client = MountClient(plain)
            with self.assertRaises(OSError) as commit:
                client.commit(ident, b"x" * 8192)
            self.assertEqual(commit.exception.errno, errno.ENOTCONN)
            self.assertIn("not a gpucachefs mount", str(commit.exception))
            self.assertEqual(os.listdir(os.path.join(plain, ident.tenant)), [])  # nothing written
            MountClient(plain, plain_directory=True).commit(ident, b"planted")  # the opt-in
            self.assertTrue(os.path.exists(client.path_of(ident)))
            with self.assertRaises(OSError) as read:
                client.read(ident)
            self.assertEqual(read.exception.errno, errno.ENOTCONN)
            self.assertEqual(client.probe_prefix([ident]), 0)
            with self.assertRaises(OSError) as require:
                client.require_mount()
            self.assertEqual(require.exception.errno, errno.ENOTCONN)
        # A real mount passes, and so does a block read through it.
        self.client.require_mount()
        ident = self.identity([self.hash()])
        self.client.commit(ident, b"on the mount")
        self.assertEqual(self.client.read(ident), b"on the mount")

    def test_read_of_a_missing_block_on_the_mount_is_enoent(self):
        with self.assertRaises(FileNotFoundError):  # a miss: the daemon is there
            self.client.read(self.identity([self.hash()]))

    def test_commit_without_a_commit_channel_renames(self):
        # A plain directory with a control file and no commit channel stands in for an older
        # daemon.
        with tempfile.TemporaryDirectory() as plain:
            client = MountClient(plain, plain_directory=True)
            ident = self.identity([self.hash()])
            os.mkdir(os.path.join(plain, ident.tenant))
            os.mkdir(os.path.join(plain, ".gpucache"))
            open(os.path.join(plain, ".gpucache", "ctl"), "w").close()
            client.commit(ident, b"by rename")
            with open(client.path_of(ident), "rb") as f:
                self.assertEqual(f.read(), b"by rename")
            self.assertEqual(os.getxattr(client.path_of(ident), IDENTITY_XATTR), ident.encode_physical_key())


class PlantedChannelTest(unittest.TestCase):
    """A stopped daemon's mountpoint is a plain directory; what others planted there as the
    commit channel must not be written or waited on (review, 2026-12-08: commit opened
    `.gpucache/commit` without the mount check that read and control make), and read says
    ENOTCONN there. No daemon needed."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpucache-py-planted-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)
        self.mnt = os.path.join(self.tmp, "mnt")
        self.victim = os.path.join(self.tmp, "victim")
        with open(self.victim, "wb") as f:
            f.write(b"the victim's own bytes")
        with open(VECTORS) as f:
            self.ident = CacheIdentity.from_json(json.load(f)[0]["identity"])
        os.makedirs(os.path.join(self.mnt, self.ident.tenant, self.ident.namespace_name()))
        os.mkdir(os.path.join(self.mnt, ".gpucache"))
        self.channel = os.path.join(self.mnt, ".gpucache", "commit")

    def commit_refused(self):
        """commit on the plain directory, in a thread so that an open that blocks fails the test
        instead of hanging it; asserts ENOTCONN and that no block was written locally."""
        outcome = []

        def run():
            try:
                MountClient(self.mnt).commit(self.ident, b"KV" * 4096)
                outcome.append(None)
            except OSError as e:
                outcome.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(timeout=5)
        if t.is_alive() and stat.S_ISFIFO(os.lstat(self.channel).st_mode):
            with open(self.channel, "rb"):  # a reader releases the blocked open
                t.join(timeout=5)
            self.fail("commit blocked opening a FIFO planted as the commit channel")
        self.assertEqual(len(outcome), 1)
        self.assertIsInstance(outcome[0], OSError, "commit succeeded on a plain directory")
        self.assertEqual(outcome[0].errno, errno.ENOTCONN)
        self.assertEqual(os.listdir(os.path.dirname(MountClient(self.mnt).path_of(self.ident))), [])

    def assert_victim_untouched(self):
        with open(self.victim, "rb") as f:
            self.assertEqual(f.read(), b"the victim's own bytes")

    # Regression (review, 2026-12-08): read of a block that is not there answered ENOENT, a
    # plain miss, where no daemon is mounted at all; the README promises ENOTCONN, as commit.
    def test_read_on_a_plain_directory_is_enotconn_even_for_a_missing_block(self):
        client = MountClient(self.mnt)
        for mountpoint in (self.mnt, os.path.join(self.tmp, "nowhere")):
            with self.subTest(mountpoint=mountpoint), self.assertRaises(OSError) as read:
                MountClient(mountpoint).read(self.ident)
            self.assertEqual(read.exception.errno, errno.ENOTCONN)
        self.assertFalse(os.path.exists(client.path_of(self.ident)))

    def test_a_symlinked_channel_is_not_followed(self):
        os.symlink(self.victim, self.channel)
        self.commit_refused()
        self.assert_victim_untouched()

    def test_a_symlinked_gpucache_directory_is_not_followed(self):
        os.rmdir(os.path.join(self.mnt, ".gpucache"))
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.mkdir(elsewhere)
        os.link(self.victim, os.path.join(elsewhere, "commit"))
        os.symlink(elsewhere, os.path.join(self.mnt, ".gpucache"))
        self.commit_refused()
        self.assert_victim_untouched()

    def test_a_planted_file_or_hard_link_is_not_written(self):
        os.link(self.victim, self.channel)  # regular, but on the local disk, not the mount
        self.commit_refused()
        self.assert_victim_untouched()

    def test_a_planted_fifo_fails_fast(self):
        os.mkfifo(self.channel)
        self.commit_refused()


if __name__ == "__main__":
    unittest.main()
