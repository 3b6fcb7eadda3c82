"""A missed prefix asked of the cold tier: loaded asynchronously, or recomputed by a deadline.

ColdDeadlineTest (label engine): the daemon's object store is a socket on 127.0.0.1 that
accepts and never answers, so every refill hangs in the daemon; the connector gives up at its
deadline and the engine recomputes. ColdRgwTest (label cold): against the real Ceph RADOS
Gateway the cold tests run (ctest fixture cold_rgw, tests/cold/harness/rgw.sh), blocks packed
to S3 and evicted come back through `cold.refill` and load bit-identically.
"""

import os
import socket
import tempfile
import threading
import unittest

from connector_support import BLOCK, config, engine, garbage_past, identities
from daemon import BUILD_DIR, Daemon
from engine_harness import Request
from gpucache.client import MountClient
from test_connector import prompt


def cold_section(endpoint, creds, bucket="gpucache-test", region="us-east-1", prefix="engine/"):
    return ('\n[cold]\nenabled = true\nendpoint = "%s"\nbucket = "%s"\nregion = "%s"\n'
            'credentials_file = "%s"\nprefix = "%s"\nwrite_back = "manual"\n'
            'connect_timeout = 1.0\ntransfer_timeout = 5.0\nkeyring_file = "%s"\n'
            % (endpoint, bucket, region, creds, prefix, os.path.join(os.path.dirname(creds), "keyring")))


def write_credentials(directory, access="none", secret="none"):
    path = os.path.join(directory, "s3.credentials")
    with open(path, "w") as f:
        f.write("access_key=%s\nsecret_key=%s\n" % (access, secret))
    os.chmod(path, 0o600)
    # The seal keyring beside it (docs/cold-tier.md, "Seals and the keyring").
    keyring = os.path.join(directory, "keyring")
    with open(keyring, "w") as f:
        f.write("current = k1\nkey.k1 = %s\n" % ("1" * 64))
    os.chmod(keyring, 0o600)
    return path


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (until closed)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


class _ColdCase:
    def store_prefix(self, mnt, evict_from):
        """Stores a 4-block prefix and evicts blocks [evict_from, 4) from the hot tier."""
        self.cfg = config(mnt, cold_refill=True, cold_deadline_s=self.deadline)
        self.prefix = prompt(self.id(), 4, tail=0)
        h, _ = engine(self.cfg)
        h.add(Request("a", self.prefix + [1], max_new_tokens=1))
        h.run()
        h.worker.drain()
        self.idents = identities(self.cfg, self.prefix)
        self.after_store(mnt)
        for ident in self.idents[evict_from:]:
            reply = MountClient(mnt).control({"op": "evict", "path": ident.relative_path()})
            self.assertTrue(reply["ok"], reply)

    def after_store(self, mnt):
        pass

    def second_request(self):
        h, model = engine(self.cfg)
        b = h.add(Request("b", self.prefix + [2, 3], max_new_tokens=2))
        self.assertEqual(h.scheduler.lookup(b.view(), 0), (4 * BLOCK, True))  # loadable, asynchronously
        h.run()
        h.worker.drain()
        self.assertEqual(garbage_past(h, model, "b"), [])
        self.assertEqual(len(b.output), 2)
        return h, b


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class ColdDeadlineTest(_ColdCase, unittest.TestCase):
    deadline = 0.5

    def setUp(self):
        self.server = SilentServer()
        self.tmp = tempfile.TemporaryDirectory()
        creds = write_credentials(self.tmp.name)
        self.daemon = Daemon(cold_section("http://127.0.0.1:%d" % self.server.port, creds))

    def tearDown(self):
        self.server.close()  # the refill stuck in the daemon ends now
        self.daemon.close()
        self.tmp.cleanup()

    def test_a_refill_that_never_answers_means_recompute_from_there(self):
        self.store_prefix(self.daemon.mnt, evict_from=1)
        h, b = self.second_request()
        self.assertEqual(b.loaded_tokens, BLOCK)  # the hot block loads; the rest is recomputed
        self.assertEqual(h.worker.stats.failed_blocks, {"refill": 1})

    # Regression (review, 2026-12-08): a prompt nobody stored, neither hot nor cold, was claimed
    # as loadable asynchronously; its refill failed from block 0, vLLM 0.32 freed it and looked
    # it up again, and the lookup claimed the same cold blocks again: the request never ran.
    def test_a_prompt_nobody_stored_is_computed_after_one_failed_refill(self):
        self.cfg = config(self.daemon.mnt, cold_refill=True, cold_deadline_s=self.deadline)
        h, model = engine(self.cfg)
        new = h.add(Request("new", prompt(self.id(), 3, tail=5), max_new_tokens=2))
        self.assertEqual(h.scheduler.lookup(new.view(), 0), (3 * BLOCK, True))  # asked of the cold tier
        h.run(max_steps=200)  # old code: RuntimeError("requests did not finish")
        h.worker.drain()
        self.assertEqual(len(new.output), 2)
        self.assertEqual(new.loaded_tokens, 0)  # all computed
        self.assertEqual(garbage_past(h, model, "new"), [])
        self.assertEqual(h.worker.stats.failed_blocks, {"refill": 1})  # one failed load, not one per step
        # It was stored as it was computed: another request now finds it hot.
        again = Request("again", new.prompt, max_new_tokens=1)
        self.assertEqual(h.scheduler.lookup(again.view(), 0), (3 * BLOCK, False))


ENV_FILE = os.environ.get("GPUCACHE_S3_ENV_FILE")


def rgw_env():
    with open(ENV_FILE) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)


@unittest.skipUnless(BUILD_DIR and ENV_FILE, "needs GPUCACHE_BUILD_DIR and the cold_rgw fixture")
class ColdRgwTest(_ColdCase, unittest.TestCase):
    deadline = 30.0  # the gateway answers; a test machine may be slow

    def setUp(self):
        env = rgw_env()
        self.tmp = tempfile.TemporaryDirectory()
        creds = write_credentials(self.tmp.name, env["GPUCACHE_S3_ACCESS_KEY"], env["GPUCACHE_S3_SECRET_KEY"])
        prefix = "engine-%d-%s/" % (os.getpid(), self.id().rsplit(".", 1)[-1].lower()[:40])
        self.daemon = Daemon(cold_section(env["GPUCACHE_S3_ENDPOINT"], creds, env["GPUCACHE_S3_BUCKET"],
                                          env["GPUCACHE_S3_REGION"], prefix))

    def tearDown(self):
        self.daemon.close()
        self.tmp.cleanup()

    def pack(self, mnt):
        """cold.pack, then drains again while a temporary error (a gateway still warming up)
        left a job pending, as the C++ cold tests do."""
        client = MountClient(mnt)
        reply = client.control({"op": "cold.pack", "tenant": "acme"})
        self.assertTrue(reply["ok"], reply)
        pending = reply["drain"]["pending"]
        for _ in range(5):
            if not pending:
                break
            pending = client.control({"op": "cold.drain"})["drain"]["pending"]
        self.assertEqual(pending, 0, reply)

    def test_evicted_blocks_come_back_from_s3_and_load(self):
        self.after_store = self.pack
        self.store_prefix(self.daemon.mnt, evict_from=1)
        h, b = self.second_request()
        self.assertEqual(b.loaded_tokens, 4 * BLOCK)
        self.assertEqual(h.worker.stats.failed_blocks, {})
        self.assertTrue(all(os.path.exists(MountClient(self.daemon.mnt).path_of(i)) for i in self.idents))

    def test_a_block_never_packed_ends_the_refilled_prefix(self):
        self.store_prefix(self.daemon.mnt, evict_from=1)  # evicted without being packed
        h, b = self.second_request()
        self.assertEqual(b.loaded_tokens, BLOCK)
        self.assertEqual(h.worker.stats.failed_blocks, {"refill": 1})


if __name__ == "__main__":
    unittest.main()
