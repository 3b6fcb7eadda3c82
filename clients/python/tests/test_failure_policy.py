"""Any error on a block truncates the hit there; the engine recomputes, never uses garbage (label engine).

Each case stores a 4-block prefix, damages block 1 or 2 in one way, and runs a second request
over it: the blocks before the damaged one load, the engine is told about the rest (or the
lookup stops before them), recomputes them, and attends only to what recompute gives.
"""

import os
import shutil
import tempfile
import unittest

from connector_support import BLOCK, backing_path, config, engine, garbage_past, identities
from daemon import BUILD_DIR, Daemon
from engine_harness import PagedCache, Request
from gpucache.connector_scheduler import SchedulerCore
from gpucache.connector_types import ScheduledRequest, StepInfo
from gpucache.connector_worker import WorkerCore
from gpucache.client import MountClient
from test_connector import prompt

PAYLOAD_OFFSET = 65536  # data_offset of a block file (docs/block-format.md)


class _Case:
    def store_prefix(self, root):
        self.cfg = config(root)
        self.prefix = prompt(self.id(), 4, tail=0)
        h, _ = engine(self.cfg)
        h.add(Request("a", self.prefix + [1, 2], max_new_tokens=1))
        h.run()
        h.worker.drain()
        self.idents = identities(self.cfg, self.prefix)

    def second_request(self):
        h, model = engine(self.cfg)
        b = h.add(Request("b", self.prefix + [3, 4, 5], max_new_tokens=2))
        h.run()
        h.worker.drain()
        self.assertEqual(garbage_past(h, model, "b"), [])  # never attended to a bad block
        self.assertEqual(len(b.output), 2)
        return h, b


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class MountFailureTest(_Case, unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon()
        self.store_prefix(self.daemon.mnt)

    def tearDown(self):
        self.daemon.close()

    def test_corruption_inside_a_later_layer_truncates_at_that_block(self):
        layer = 2  # the daemon finds it only when that layer is read: mid-load
        with open(backing_path(self.daemon, self.idents[2]), "r+b") as f:
            at = PAYLOAD_OFFSET + layer * self.cfg.geometry.layer_stride + 100
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x55]))
        h, b = self.second_request()
        self.assertEqual(b.rewinds, 1)  # the step that found it was dropped and recomputed
        self.assertEqual(b.loaded_tokens, 2 * BLOCK)
        self.assertEqual(h.worker.stats.failed_blocks, {"io": 1})
        self.assertTrue(os.path.exists(MountClient(self.daemon.mnt).path_of(self.idents[2])))  # saved again

    def test_a_missing_block_ends_the_hit_at_the_lookup(self):
        reply = MountClient(self.daemon.mnt).control({"op": "evict", "path": self.idents[1].relative_path()})
        self.assertTrue(reply["ok"], reply)
        h, b = self.second_request()
        self.assertEqual((b.loaded_tokens, b.rewinds), (BLOCK, 0))
        self.assertTrue(os.path.exists(MountClient(self.daemon.mnt).path_of(self.idents[1])))  # saved again

    def test_a_block_of_the_wrong_size_truncates_at_that_block(self):
        MountClient(self.daemon.mnt).control({"op": "evict", "path": self.idents[2].relative_path()})
        MountClient(self.daemon.mnt).commit(self.idents[2], bytes(8192))  # right name, short payload
        h, b = self.second_request()
        self.assertEqual(b.loaded_tokens, 2 * BLOCK)
        self.assertEqual(h.worker.stats.failed_blocks, {"size": 1})

    def test_a_dead_daemon_means_recompute(self):
        self.daemon.kill()  # ENOTCONN from now on
        h, b = self.second_request()
        self.assertEqual(b.loaded_tokens, 0)
        self.assertEqual(h.worker.stats.committed_blocks, 0)


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class PlainDirectoryFailureTest(_Case, unittest.TestCase):
    """A planted file (another block's bytes and identity under this name) cannot come through
    the daemon, which checks identities at commit; on a plain directory it can."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        os.mkdir(os.path.join(self.root, "acme"))
        self.store_prefix(self.root)

    def tearDown(self):
        shutil.rmtree(self.root)

    def test_a_foreign_identity_truncates_at_that_block(self):
        client = MountClient(self.root)
        shutil.copy2(client.path_of(self.idents[0]), client.path_of(self.idents[1]))  # with its xattr
        h, b = self.second_request()
        self.assertEqual(b.loaded_tokens, BLOCK)
        self.assertEqual(h.worker.stats.failed_blocks, {"identity": 1})

    # Regression (review, 2026-12-06): a synchronous load whose layers were never waited for
    # (vLLM skips wait_for_layer_load when it replays a full CUDA graph) was reported as a
    # success, though nothing had been copied into the paged cache.
    def test_a_load_whose_layers_were_never_waited_for_fails_every_block(self):
        sched, worker = SchedulerCore(self.cfg), WorkerCore(self.cfg)
        cache = PagedCache(self.cfg.geometry, 32)
        worker.register(cache.layers)
        req = Request("b", self.prefix + [3, 4, 5])
        tokens, _ = sched.lookup(req.view(), 0)
        self.assertEqual(tokens, 4 * BLOCK)
        ids = list(range(len(req.prompt) // 16 + 1))
        sched.on_alloc(req.view(), ids, tokens)
        step = StepInfo([ScheduledRequest("b", tokens, len(req.prompt) - tokens, ids, True)])
        worker.bind(sched.build_meta(step))
        worker.start_load()  # and no wait_for_layer
        worker.wait_for_save()
        worker.get_finished(set())
        self.assertEqual(worker.take_load_errors(), set(ids[:4 * BLOCK // 16]))
        self.assertEqual(worker.stats.failed_blocks, {"unwaited": 1})
        worker.close()


if __name__ == "__main__":
    unittest.main()
