"""Any error on a block truncates the hit there; the engine recomputes, never uses garbage (label engine).

Each case stores a 4-block prefix, damages block 1 or 2 in one way, and runs a second request
over it: the blocks before the damaged one load, the engine is told about the rest (or the
lookup stops before them), recomputes them, and attends only to what recompute gives.
"""

import dataclasses
import errno
import os
import shutil
import tempfile
import threading
import unittest
from unittest import mock

import torch

from connector_support import BLOCK, backing_path, config, engine, garbage_past, identities
from daemon import BUILD_DIR, Daemon
from engine_harness import PagedCache, Request
from gpucache.connector_scheduler import SchedulerCore
from gpucache.connector_types import SaveSpec, ScheduledRequest, StepInfo, StepMeta
from gpucache.connector_worker import WorkerCore
from gpucache.client import MountClient
from gpucache.kv_layout import KVGeometry
from gpucache.staging import StagingPool
from test_connector import prompt

PAYLOAD_OFFSET = 65536  # data_offset of a block file (docs/block-format.md)


class _Case:
    staging_layers = None  # ConnectorConfig's default

    def store_prefix(self, root, plain=False):
        self.cfg = config(root, plain_directory=plain, **({} if self.staging_layers is None else {"load_staging_layers": self.staging_layers}))
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

    # Regression (review, 2026-12-07): vLLM's prefix cache shares a block loaded synchronously
    # with every request of the same step at once. When its load failed, the worker held back
    # only the saves of the request that had loaded it: a request sharing the block committed
    # blocks computed over garbage, under their right names, for every engine to load later.
    def test_a_request_sharing_a_block_whose_load_failed_saves_nothing_that_step(self):
        with open(backing_path(self.daemon, self.idents[2]), "r+b") as f:
            f.seek(PAYLOAD_OFFSET + 100)
            byte = f.read(1)
            f.seek(PAYLOAD_OFFSET + 100)
            f.write(bytes([byte[0] ^ 0x55]))
        sched, worker = SchedulerCore(self.cfg), WorkerCore(self.cfg)
        worker.register(PagedCache(self.cfg.geometry, 64).layers)
        loader = Request("loader", self.prefix + [3, 4, 5])
        tokens, _ = sched.lookup(loader.view(), 0)
        self.assertEqual(tokens, 4 * BLOCK)
        shared = list(range(4 * BLOCK // 16))  # the engine blocks of the 4 stored blocks
        loader_ids = shared + [16]
        sched.on_alloc(loader.view(), loader_ids, tokens)
        # Over the same prefix and two blocks of its own: the engine's prefix cache gives it the
        # loader's engine blocks, so the connector loads nothing for it, and saves its two.
        sharer = Request("sharer", self.prefix + prompt("own", 2, tail=3))
        self.assertEqual(sched.lookup(sharer.view(), 4 * BLOCK), (0, False))
        sharer_ids = shared + list(range(17, 26))
        sched.on_alloc(sharer.view(), sharer_ids, 0)
        step = StepInfo([ScheduledRequest("loader", tokens, len(loader.prompt) - tokens, loader_ids, True),
                         ScheduledRequest("sharer", 4 * BLOCK, len(sharer.prompt) - 4 * BLOCK, sharer_ids, True)])
        meta = sched.build_meta(step)
        self.assertEqual([len(s.blocks) for s in meta.saves], [2])
        worker.bind(meta)
        worker.start_load()
        for layer in range(self.cfg.geometry.layers):
            worker.wait_for_layer(layer)
            worker.save_layer(layer)
        worker.wait_for_save()
        worker.drain()
        worker.get_finished(set())
        self.assertTrue(worker.take_load_errors() >= set(range(8, 12)))  # block 2's engine blocks
        self.assertEqual(worker.stats.committed_blocks, 0)
        self.assertEqual(worker.stats.skipped_commits.get("load-failed"), 2)
        for ident in identities(self.cfg, sharer.prompt)[4:6]:
            self.assertFalse(os.path.exists(MountClient(self.daemon.mnt).path_of(ident)))
        # The sharer's later saves stay withheld until it computes again from where that step
        # did (vLLM's rewind), after which they are good.
        self.assertTrue(worker._attended_failed_load(SaveSpec("sharer", [], 6 * BLOCK)))
        # With asynchronous scheduling (or pipeline parallelism) a request scheduled before
        # vLLM heard of the failure may attend to the block in a later step: it is withheld as
        # well, whether or not that step saves anything, and from then on, until it computes
        # again from there. One attending to the block in a step that computes it again, or a
        # few steps on (its engine id given to another request), is not.
        def step(attended, recomputed=()):
            worker.bind(StepMeta(attended=attended, recomputed=list(recomputed)))
            worker.wait_for_save()
            worker.get_finished(set())
        step({"late": (5 * BLOCK, shared)})
        self.assertTrue(worker._attended_failed_load(SaveSpec("late", [], 6 * BLOCK)))
        step({"later": (4 * BLOCK, shared)})  # no save this step
        self.assertTrue(worker._attended_failed_load(SaveSpec("later", [], 5 * BLOCK)))
        step({"rewound": (5 * BLOCK, shared)}, recomputed=shared[8:])  # the loader again
        self.assertFalse(worker._attended_failed_load(SaveSpec("rewound", [], 5 * BLOCK)))
        self.assertTrue(worker._attended_failed_load(SaveSpec("later", [], 5 * BLOCK)))
        self.assertFalse(worker._attended_failed_load(SaveSpec("later", [], 4 * BLOCK)))  # rewound
        step({"fresh": (5 * BLOCK, shared)})  # computed again, so no longer failed
        self.assertFalse(worker._attended_failed_load(SaveSpec("fresh", [], 5 * BLOCK)))
        worker.close()


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class MountFailureRingTest(MountFailureTest):
    """The same failures with one staging slot for the 4 layers: the reads of each layer wait
    for the previous layer's scatter, and a failure found in a later layer still truncates."""

    staging_layers = 1


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class PlainDirectoryFailureTest(_Case, unittest.TestCase):
    """A planted file (another block's bytes and identity under this name) cannot come through
    the daemon, which checks identities at commit; on a plain directory it can."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        os.mkdir(os.path.join(self.root, "acme"))
        self.store_prefix(self.root, plain=True)

    def tearDown(self):
        shutil.rmtree(self.root)

    def test_a_foreign_identity_truncates_at_that_block(self):
        client = MountClient(self.root, plain_directory=True)
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


DEEP = KVGeometry(layers=12, kv_heads=2, head_dim=64, dtype=torch.bfloat16, engine_block_size=16,
                  block_tokens=BLOCK)  # 12 layers: a ring of a few slots goes round several times


def _counting_staging(allocated, fail=False):
    """A KVGeometry.staging that adds each tensor's bytes to allocated[0] (or raises, as torch
    does when pinned memory runs out)."""
    real = KVGeometry.staging

    def staging(self, blocks, pin):
        if fail:
            raise RuntimeError("CUDA error: out of memory (injected)")
        t = real(self, blocks, pin)
        allocated[0] += t.numel() * t.element_size()
        return t
    return staging


class LoadStagingTest(unittest.TestCase):
    """What a load holds in staging (plain directory: no mount needed).

    Regression (2026-12, staging): a load staged every layer of every block at once (a full hit
    of a 128k-token Llama-3-8B prompt: 16 GiB, pinned on GPU hosts), the pool kept the largest
    sets for good, and a failed allocation raised out of start_load_kv and crashed the engine."""

    BLOCKS = 6

    def setUp(self):
        self.root = tempfile.mkdtemp()
        os.mkdir(os.path.join(self.root, "acme"))
        self.prefix = prompt(self.id(), self.BLOCKS, tail=0)
        h, _ = engine(config(self.root, geometry=DEEP, plain_directory=True))
        h.add(Request("a", self.prefix + [1, 2], max_new_tokens=1))
        h.run()
        h.worker.drain()
        self.assertEqual(h.worker.stats.committed_blocks, self.BLOCKS)
        h.worker.close()

    def tearDown(self):
        shutil.rmtree(self.root)

    def load(self, cfg, staging=None):
        """A second request over the stored prefix (no block of its own to save); the harness."""
        h, model = engine(cfg)
        b = h.add(Request("b", self.prefix + [3, 4, 5], max_new_tokens=2))
        with mock.patch.object(KVGeometry, "staging", staging or KVGeometry.staging):
            h.run()
        h.worker.drain()
        self.assertEqual(garbage_past(h, model, "b"), [])
        self.assertEqual(len(b.output), 2)
        h.worker.close()
        return h, model, b

    def test_a_load_stages_a_ring_of_layers_not_every_layer(self):
        layer_bytes = 2 * DEEP.half_bytes  # one layer of one block
        for depth in (None, 1, 3, 5, 12, 50):  # None: the default, 4
            with self.subTest(depth=depth):
                allocated = [0]
                cfg = config(self.root, geometry=DEEP, plain_directory=True)
                if depth is not None:
                    cfg = dataclasses.replace(cfg, load_staging_layers=depth)
                h, model, b = self.load(cfg, _counting_staging(allocated))
                depth = depth or 4
                self.assertEqual(b.loaded_tokens, self.BLOCKS * BLOCK)
                self.assertEqual((b.rewinds, model.bad_past), (0, []))  # every layer bit-exact
                self.assertEqual(allocated[0], min(depth, DEEP.layers) * self.BLOCKS * layer_bytes)
                self.assertEqual(h.worker.staging.peak_bytes, allocated[0])

    def test_a_failed_staging_allocation_fails_the_load_and_the_engine_recomputes(self):
        h, model, b = self.load(config(self.root, geometry=DEEP, plain_directory=True), _counting_staging([0], fail=True))
        self.assertEqual(b.loaded_tokens, 0)
        self.assertEqual(b.rewinds, 1)  # told at the end of the step: recomputed from token 0
        self.assertEqual(h.worker.stats.failed_blocks, {"staging": 1})
        self.assertEqual(h.worker.stats.loaded_blocks, 0)
        # The recompute's saves find no staging either: dropped, not raised out of save_kv_layer.
        self.assertEqual(h.worker.stats.skipped_commits, {"staging": self.BLOCKS})

    def test_a_load_whose_later_layers_were_never_waited_for_neither_hangs_nor_passes(self):
        # Layers past the ring wait for a slot the unwaited layers never give back: finish()
        # must not wait for reads that can never be queued, and every block fails.
        for waited in ([], [0], [0, 1, 2, 3], [0, 2, 5], list(range(DEEP.layers - 1))):
            with self.subTest(waited=waited):
                cfg = config(self.root, geometry=DEEP, plain_directory=True)  # 4 slots for 12 layers
                sched, worker = SchedulerCore(cfg), WorkerCore(cfg)
                cache = PagedCache(DEEP, 32)
                worker.register(cache.layers)
                req = Request("b", self.prefix + [3, 4, 5])
                tokens, _ = sched.lookup(req.view(), 0)
                self.assertEqual(tokens, self.BLOCKS * BLOCK)
                ids = list(range(len(req.prompt) // 16 + 1))
                sched.on_alloc(req.view(), ids, tokens)
                step = StepInfo([ScheduledRequest("b", tokens, len(req.prompt) - tokens, ids, True)])
                worker.bind(sched.build_meta(step))
                done = threading.Event()

                def step_body():
                    worker.start_load()
                    for layer in waited:
                        worker.wait_for_layer(layer)
                    worker.wait_for_save()
                    worker.get_finished(set())
                    done.set()
                t = threading.Thread(target=step_body, daemon=True)
                t.start()
                self.assertTrue(done.wait(30), "the step hung")
                self.assertEqual(worker.take_load_errors(), set(ids[:self.BLOCKS * BLOCK // 16]))
                self.assertEqual(worker.stats.failed_blocks, {"unwaited": 1})
                worker.close()

    def test_a_scatter_that_raises_fails_the_load_instead_of_the_forward(self):
        # Regression (review, 2026-12-07): an exception copying a slot into the paged cache
        # reached vLLM's forward (the engine died), and the slot was never queued again, so a
        # later layer could scatter what another layer had left in it.
        import gpucache.layer_load as layer_load
        real, calls = layer_load.scatter, [0]

        def failing(layer, ids, staging):
            calls[0] += 1
            if calls[0] == 2:
                raise RuntimeError("injected scatter failure")
            real(layer, ids, staging)
        with mock.patch.object(layer_load, "scatter", failing):
            h, model, b = self.load(config(self.root, geometry=DEEP, plain_directory=True))
        self.assertEqual(b.loaded_tokens, 0)
        self.assertEqual(b.rewinds, 1)
        self.assertEqual(h.worker.stats.failed_blocks, {"error": 1})  # load() checked the output

    # Regression (review, 2026-12-08): an error closing a block file (os.close: EINTR, a
    # flush's EIO) was raised out of the load's finish into the engine's forward, and the load's
    # other files stayed open and its staging stayed lent for good.
    def test_a_block_file_whose_close_fails_neither_reaches_the_forward_nor_leaks(self):
        from gpucache.block_io import BlockSource
        real_open, real_close = BlockSource._open, os.close
        block_fds, closed = set(), []

        def opening(source):
            fd = real_open(source)
            block_fds.add(fd)
            return fd

        def closing(fd):
            real_close(fd)  # as Linux does: the descriptor is released, then the error told
            if fd in block_fds:
                block_fds.discard(fd)
                closed.append(fd)
                raise OSError(errno.EIO, "injected close failure")
        with mock.patch.object(BlockSource, "_open", opening), mock.patch.object(os, "close", closing):
            h, model, b = self.load(config(self.root, geometry=DEEP, plain_directory=True))
        self.assertEqual(len(closed), self.BLOCKS)  # every block file closed, not just the first
        self.assertEqual(block_fds, set())
        self.assertEqual(b.loaded_tokens, self.BLOCKS * BLOCK)  # the bytes were read: a hit
        self.assertEqual((b.rewinds, model.bad_past), (0, []))
        self.assertEqual(h.worker.staging.lent_bytes, 0)  # the load's staging given back

    def test_the_pool_gives_back_idle_staging_above_its_byte_cap(self):
        per_block = DEEP.layers * 2 * DEEP.half_bytes  # a save set of one block
        pool = StagingPool(DEEP, pin=False, keep=2, keep_bytes=3 * per_block)
        big, small = pool.acquire(8), pool.acquire(2)
        pool.release(big)  # a one-off huge set: over the cap, not kept
        self.assertEqual(pool.idle_bytes(), 0)
        pool.release(small)
        self.assertEqual(pool.idle_bytes(), 2 * per_block)
        again = pool.acquire(1)  # served from the kept set
        self.assertIs(again.tensors[0], small.tensors[0])
        ring = pool.acquire(4, 3)  # a load's ring: 3 slots
        self.assertEqual(len(ring.layers), 3)
        self.assertEqual(pool.lent_bytes, 2 * per_block + 3 * 4 * 2 * DEEP.half_bytes)


if __name__ == "__main__":
    unittest.main()
