"""The connector core driven in vLLM's call order (engine_harness) against a real mount (label engine).

A synthetic model writes KV that is a pure function of token, position and layer, so whatever a
request attends to can be checked against what recompute gives, bit for bit.
"""

import dataclasses
import errno
import os
import random
import signal
import tempfile
import unittest

import torch

from connector_support import BLOCK, GEOMETRY, config, engine, garbage_past, identities
from daemon import BUILD_DIR, Daemon
from engine_harness import EngineHarness, PagedCache, Request, SyntheticModel
from gpucache.client import MountClient
from gpucache.connector_scheduler import SchedulerCore
from gpucache.connector_worker import WorkerCore
from gpucache.connector_types import ScheduledRequest, StepInfo
from gpucache.kv_layout import KVGeometry


def prompt(seed, blocks, tail=5):
    rng = random.Random(seed)
    return [rng.randrange(50000) for _ in range(blocks * BLOCK + tail)]


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class ConnectorLifecycleTest(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon()
        self.cfg = config(self.daemon.mnt)
        self.prefix = prompt(self.id(), 4, tail=0)

    def tearDown(self):
        self.daemon.close()

    def save_prefix(self, **engine_args):
        h, model = engine(self.cfg, **engine_args)
        a = h.add(Request("a", self.prefix + [1, 2, 3], max_new_tokens=2))
        h.run()
        h.worker.drain()
        self.assertEqual(h.worker.stats.committed_blocks, 4)
        self.assertEqual(garbage_past(h, model, "a"), [])
        return h, a

    def test_a_second_request_loads_the_prefix_layer_by_layer_bit_identically(self):
        self.save_prefix(kv_tuple=False)
        h, model = engine(self.cfg, kv_tuple=True)  # the other paged form, other block ids
        h.cache.allocate(7)
        b = h.add(Request("b", self.prefix + [9, 8, 7, 6], max_new_tokens=3))
        h.run()
        self.assertEqual(b.loaded_tokens, 4 * BLOCK)
        self.assertEqual(b.rewinds, 0)
        self.assertEqual(model.bad_past, [])  # every layer's past was exactly recompute's
        self.assertEqual(h.worker.stats.loaded_blocks, 4)
        self.assertEqual(len(b.output), 3)

    def test_lookup_is_side_effect_free_and_leaves_a_token_to_compute(self):
        self.save_prefix()
        h, _ = engine(self.cfg)
        view = Request("b", self.prefix + [4]).view()
        before = sorted(os.listdir(os.path.join(self.daemon.data, "blocks", "acme")))
        answers = {h.scheduler.lookup(view, 0) for _ in range(3)}
        self.assertEqual(answers, {(4 * BLOCK, False)})
        self.assertEqual(h.scheduler.lookup(view, 2 * BLOCK), (2 * BLOCK, False))  # beyond what is computed
        exact = Request("c", self.prefix).view()  # the prompt is exactly the 4 blocks
        self.assertEqual(h.scheduler.lookup(exact, 0), (3 * BLOCK, False))
        self.assertEqual(sorted(os.listdir(os.path.join(self.daemon.data, "blocks", "acme"))), before)
        self.assertEqual(h.scheduler.build_meta(StepInfo([])).loads, [])  # nothing was allocated

    def test_a_request_finishing_while_its_save_is_in_flight(self):
        h, model = engine(self.cfg, num_blocks=20)  # small: freed blocks are reused soon
        h.worker.commit_gate.clear()  # every commit waits: the saves are in flight
        a = h.add(Request("a", self.prefix + [1, 2, 3], max_new_tokens=1))
        h.run()
        self.assertEqual(h.finish_replies["a"], (False, None))  # the engine frees the blocks now
        for ident in identities(self.cfg, self.prefix):
            self.assertFalse(os.path.exists(os.path.join(self.daemon.mnt, ident.relative_path())))
        # The freed blocks are reused at once and overwritten by another request.
        other = h.add(Request("other", prompt("other", 3), max_new_tokens=1))
        h.run()
        self.assertTrue(set(a.block_ids) & set(other.block_ids))
        h.worker.commit_gate.set()
        h.worker.drain()
        h2, model2 = engine(self.cfg, kv_tuple=True)
        b = h2.add(Request("b", self.prefix + [5], max_new_tokens=1))
        h2.run()
        self.assertEqual(b.loaded_tokens, 4 * BLOCK)
        self.assertEqual(model2.bad_past, [])  # what was saved is A's KV, not the other request's

    def test_a_preempted_request_resumes_from_the_blocks_it_saved(self):
        h, model = engine(self.cfg)
        a = h.add(Request("a", self.prefix + [1, 2, 3], max_new_tokens=2))
        h.step()
        h.step()  # two chunks of one block each: two blocks complete and saved
        self.assertEqual(a.num_computed, 2 * BLOCK)
        h.preempt("a")
        h.worker.drain()
        h.run()
        self.assertEqual(a.loaded_tokens, 2 * BLOCK)  # resumed by loading what it had saved
        self.assertEqual(garbage_past(h, model, "a"), [])
        h.worker.drain()
        self.assertEqual(sum(os.path.exists(os.path.join(self.daemon.mnt, i.relative_path()))
                             for i in identities(self.cfg, self.prefix)), 4)

    def test_blocks_the_engine_has_itself_need_not_be_in_the_mount(self):
        self.save_prefix()
        first = identities(self.cfg, self.prefix)[0]
        MountClient(self.daemon.mnt).control({"op": "evict", "path": first.relative_path()})
        h, _ = engine(self.cfg)
        view = Request("b", self.prefix + [4]).view()
        self.assertEqual(h.scheduler.lookup(view, 0), (0, False))  # block 0 is missing
        self.assertEqual(h.scheduler.lookup(view, BLOCK), (3 * BLOCK, False))  # the engine has it

    def test_engine_blocks_the_engine_computed_itself_are_not_written(self):
        self.save_prefix()
        h, model = engine(self.cfg)
        b = Request("b", self.prefix + [7])
        # As if vLLM's own prefix cache had the first engine block (16 tokens): the connector
        # loads the rest of gpucache block 0 and blocks 1-3, and leaves engine block 0 alone.
        self.assertEqual(h.scheduler.lookup(b.view(), 16), (4 * BLOCK - 16, False))
        b.block_ids = h.cache.allocate(4 * BLOCK // 16 + 1)
        sentinel = torch.full_like(h.cache.layers[0][0][b.block_ids[0]], 3.0)
        for layer in h.cache.layers:
            layer[0][b.block_ids[0]] = sentinel
        h.scheduler.on_alloc(b.view(), b.block_ids, 4 * BLOCK - 16)
        w = h.worker
        w.bind(h.scheduler.build_meta(StepInfo([ScheduledRequest("b", 4 * BLOCK, 1, b.block_ids, True)])))
        w.start_load()
        for layer in range(GEOMETRY.layers):
            w.wait_for_layer(layer)
        w.get_finished(set())
        self.assertEqual(w.take_load_errors(), set())
        for layer in range(GEOMETRY.layers):
            self.assertTrue(torch.equal(h.cache.layers[layer][0][b.block_ids[0]], sentinel))
            k, v = h.cache.read(layer, b.block_ids, 4 * BLOCK)
            ek, ev = model.kv(b.tokens[:4 * BLOCK], 0, layer)
            self.assertTrue(torch.equal(k[16:], ek[16:]) and torch.equal(v[16:], ev[16:]))


class UncacheableRequestTest(unittest.TestCase):
    """No mount: the scheduler core on a plain directory holding the prompt's blocks."""

    # Regression (review, 2026-12-06): a request whose KV depends on more than its token ids
    # (images, prompt embeddings) was named by its token ids alone, so it loaded the KV of
    # another request with the same placeholder tokens (a different image) and saved its own
    # under that request's names.
    def test_an_uncacheable_request_matches_nothing_and_saves_nothing(self):
        with tempfile.TemporaryDirectory() as root:
            cfg = config(root, plain_directory=True)
            tokens = prompt("mm", 3, tail=1)
            for ident in identities(cfg, tokens):  # every block of the prompt is present
                path = os.path.join(root, ident.relative_path())
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "wb").close()
            h, _ = engine(cfg)
            self.assertEqual(h.scheduler.lookup(Request("text", tokens).view(), 0), (3 * BLOCK, False))
            view = dataclasses.replace(Request("image", tokens).view(), uncacheable="multimodal inputs")
            with self.assertLogs("gpucache.connector_scheduler", "WARNING") as logs:
                self.assertEqual(h.scheduler.lookup(view, 0), (0, False))
                self.assertEqual(h.scheduler.lookup(view, 0), (0, False))
            self.assertEqual(len(logs.output), 1)  # once per reason
            ids = h.cache.allocate(3 * BLOCK // 16 + 1)
            h.scheduler.on_alloc(view, ids, 0)
            meta = h.scheduler.build_meta(StepInfo([ScheduledRequest("image", 0, len(tokens), ids, True)]))
            self.assertEqual((meta.loads, meta.saves), ([], []))
            self.assertEqual(h.scheduler.uncacheable, {"multimodal inputs": 1})
            self.assertEqual(h.scheduler.on_finished("image"), (False, None))


class AdapterNameTest(unittest.TestCase):
    # Regression (review, 2026-12-06): a LoRA name with a space or a non-ASCII character made
    # the block identity invalid, and lookup (vLLM's get_num_new_matched_tokens) raised
    # ValueError inside the scheduler for every such request.
    def test_any_lora_name_is_looked_up_saved_and_kept_apart(self):
        with tempfile.TemporaryDirectory() as root:
            cfg = config(root, plain_directory=True)
            h, _ = engine(cfg)
            tokens = prompt("lora", 3, tail=1)
            adapters = set()
            for name in ("sql-v1", "my adapter", "adaptér", "my%20adapter"):
                with self.subTest(name):
                    view = Request("r-" + name, tokens, lora_name=name, lora_path="/adapters/x").view()
                    self.assertEqual(h.scheduler.lookup(view, 0), (0, False))
                    ids = h.cache.allocate(3 * BLOCK // 16 + 1)
                    h.scheduler.on_alloc(view, ids, 0)
                    meta = h.scheduler.build_meta(StepInfo([ScheduledRequest(view.req_id, 0, len(tokens), ids, True)]))
                    ops = meta.saves[0].blocks
                    self.assertEqual(len(ops), 3)
                    for op in ops:
                        h.worker.namer.identity(op.chain, op.adapter).validate()
                    adapters.add(ops[0].adapter)
            self.assertEqual(adapters, {"sql-v1", "my%20adapter", "adapt%C3%A9r", "my%2520adapter"})


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class TensorParallelTest(unittest.TestCase):
    """One scheduler, two workers (TP ranks 0 and 1): each names and stores its own shard."""

    def test_each_rank_saves_and_loads_its_shard_and_reports_its_own_failures(self):
        daemon = Daemon()
        try:
            cfg = config(daemon.mnt)
            cfg.model = dataclasses.replace(cfg.model, tp_size=2)
            ranks = [dataclasses.replace(cfg.model, tp_rank=r) for r in (0, 1)]
            tokens = prompt("tp", 3, tail=1)
            h, model = engine(cfg)  # rank 0's worker drives its cache; rank 1 gets the same metas
            rank1 = WorkerCore(cfg, ranks[1])
            cache1 = PagedCache(GEOMETRY, 96)
            rank1.register(cache1.layers)
            req = Request("a", tokens)
            req.block_ids = h.cache.allocate(3 * BLOCK // 16 + 1)
            h.scheduler.lookup(req.view(), 0)
            h.scheduler.on_alloc(req.view(), req.block_ids, 0)
            meta = h.scheduler.build_meta(StepInfo([ScheduledRequest("a", 0, len(tokens), req.block_ids, True)]))
            for worker, cache in ((h.worker, h.cache), (rank1, cache1)):
                worker.bind(meta)
                for layer in range(GEOMETRY.layers):
                    cache.write(layer, req.block_ids, 0, *model.kv(tokens, 0, layer))
                    worker.save_layer(layer, cache.layers[layer])
                worker.wait_for_save()
                worker.drain()
                self.assertEqual(worker.stats.committed_blocks, 3)
            paths = [[MountClient(daemon.mnt).path_of(w.namer.identity(op.chain)) for op in meta.saves[0].blocks]
                     for w in (h.worker, rank1)]
            self.assertFalse(set(paths[0]) & set(paths[1]))  # tp_rank is in every path
            MountClient(daemon.mnt).control({"op": "evict", "path": os.path.relpath(paths[1][1], daemon.mnt)})

            b = Request("b", tokens)
            self.assertEqual(h.scheduler.lookup(b.view(), 0), (3 * BLOCK, False))  # rank 0's view
            b.block_ids = list(range(40, 40 + 3 * BLOCK // 16 + 1))
            h.scheduler.on_alloc(b.view(), b.block_ids, 3 * BLOCK)
            meta = h.scheduler.build_meta(StepInfo([ScheduledRequest("b", 3 * BLOCK, 1, b.block_ids, True)]))
            errors = []
            for worker in (h.worker, rank1):
                worker.bind(meta)
                worker.start_load()
                for layer in range(GEOMETRY.layers):
                    worker.wait_for_layer(layer)
                worker.get_finished(set())
                errors.append(worker.take_load_errors())
            per = BLOCK // 16
            self.assertEqual(errors, [set(), set(b.block_ids[per:3 * per])])  # rank 1 from its block 1 on
        finally:
            daemon.close()


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class PagedRoundTripTest(unittest.TestCase):
    """Random bytes saved from one paged layout load back bit-identically into the other."""

    def round_trip(self, geometry, root, save_tuple, load_tuple, plain=False):
        cfg = config(root, geometry, plain_directory=plain)
        h, _ = engine(cfg, kv_tuple=save_tuple)
        tokens = prompt("%s %s %s" % (geometry, save_tuple, load_tuple), 3, tail=1)
        req = Request("a", tokens)
        h.cache.allocate(5)
        ext, _ = h.scheduler.lookup(req.view(), 0)
        self.assertEqual(ext, 0)
        req.block_ids = h.cache.allocate(3 * BLOCK // 16 + 1)
        h.scheduler.on_alloc(req.view(), req.block_ids, 0)
        for layer in h.cache.layers:  # what a forward pass would have written: random bits
            for half in layer:
                half.view(torch.uint8).copy_(torch.randint(0, 256, half.view(torch.uint8).shape, dtype=torch.uint8))
        meta = h.scheduler.build_meta(StepInfo([ScheduledRequest("a", 0, len(tokens), req.block_ids, True)]))
        self.assertEqual([len(s.blocks) for s in meta.saves], [3])
        w = h.worker
        w.bind(meta)
        for i, layer in enumerate(h.cache.layers):
            w.save_layer(i, layer)
        w.wait_for_save()
        w.drain()
        self.assertEqual(w.stats.committed_blocks, 3)

        h2, _ = engine(cfg, kv_tuple=load_tuple)
        req2 = Request("b", tokens)
        h2.cache.allocate(11)
        ext, _ = h2.scheduler.lookup(req2.view(), 0)
        self.assertEqual(ext, 3 * BLOCK)
        req2.block_ids = h2.cache.allocate(3 * BLOCK // 16 + 1)
        h2.scheduler.on_alloc(req2.view(), req2.block_ids, ext)
        w2 = h2.worker
        w2.bind(h2.scheduler.build_meta(StepInfo([ScheduledRequest("b", ext, 1, req2.block_ids, True)])))
        w2.start_load()
        for layer in range(geometry.layers):
            w2.wait_for_layer(layer)
        w2.get_finished(set())
        self.assertEqual(w2.take_load_errors(), set())
        for layer in range(geometry.layers):
            for half in (0, 1):
                saved = h.cache.layers[layer][half][req.block_ids[:12]]
                loaded = h2.cache.layers[layer][half][req2.block_ids[:12]]
                self.assertTrue(torch.equal(saved.view(torch.uint8), loaded.view(torch.uint8)))

    def test_through_the_mount_both_forms_and_a_padded_layout(self):
        padded = KVGeometry(layers=3, kv_heads=3, head_dim=10, dtype=torch.float32, engine_block_size=16,
                            block_tokens=BLOCK)
        self.assertEqual(padded.layer_stride % 4096, 0)
        self.assertNotEqual(padded.layer_stride, 2 * padded.half_bytes)  # regions are padded
        daemon = Daemon()
        try:
            for geometry, save_tuple, load_tuple in ((GEOMETRY, False, True), (GEOMETRY, True, False),
                                                     (padded, True, True)):
                with self.subTest(geometry=geometry, save_tuple=save_tuple):
                    self.round_trip(geometry, daemon.mnt, save_tuple, load_tuple)
        finally:
            daemon.close()

    def test_on_a_plain_directory(self):
        with tempfile.TemporaryDirectory() as root:
            os.mkdir(os.path.join(root, "acme"))
            self.round_trip(GEOMETRY, root, False, False, plain=True)


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class NotMountedTest(unittest.TestCase):
    """Regression (review, 2026-12-07): with no gpucachefs mounted at the root but <root>/acme/
    there, the core committed blocks to the local disk by rename and loaded them back (and any
    file planted there), with no checksum, eviction, quota or tenancy."""

    def setUp(self):
        self.daemon = Daemon()
        self.tokens = prompt(self.id(), 3, tail=1)

    def tearDown(self):
        self.daemon.close()

    def test_a_root_without_gpucachefs_is_refused_and_its_files_never_served(self):
        with tempfile.TemporaryDirectory() as plain:
            os.mkdir(os.path.join(plain, "acme"))
            for core in (SchedulerCore, WorkerCore):
                with self.subTest(core.__name__), self.assertRaisesRegex(OSError, "not a gpucachefs mount") as e:
                    core(config(plain))
                self.assertEqual(e.exception.errno, errno.ENOTCONN)
        cfg = config(self.daemon.mnt)
        scheduler, worker = SchedulerCore(cfg), WorkerCore(cfg)  # built while the daemon is mounted
        self.daemon.proc.send_signal(signal.SIGTERM)  # stopped cleanly: the mountpoint is a plain directory
        self.daemon.proc.wait(timeout=10)
        os.mkdir(os.path.join(self.daemon.mnt, "acme"))
        planted = config(self.daemon.mnt, plain_directory=True)  # files left or planted under it
        h, _ = engine(planted)
        h.add(Request("a", self.tokens, max_new_tokens=1))
        h.run()
        h.worker.drain()
        self.assertEqual(h.worker.stats.committed_blocks, 3)
        self.assertEqual(scheduler.lookup(Request("b", self.tokens).view(), 0), (0, False))  # not hits
        # A worker asked to load them (a scheduler that did see them) fails them ("mount"): recompute.
        model = SyntheticModel(GEOMETRY)
        h = EngineHarness(SchedulerCore(planted), worker, PagedCache(GEOMETRY, 96), model, BLOCK)
        b = h.add(Request("b", self.tokens, max_new_tokens=2))
        h.run()
        self.assertEqual(set(worker.stats.failed_blocks), {"mount"})  # every attempt, no other reason
        self.assertEqual(b.loaded_tokens, 0)
        self.assertEqual(garbage_past(h, model, "b"), [])
        # Its saves are not written to the plain directory either.
        worker.drain()
        self.assertEqual(worker.stats.committed_blocks, 0)
        self.assertIn("ENOTCONN", worker.stats.skipped_commits)


class RegisterTest(unittest.TestCase):
    """The worker takes only a paged cache of the geometry's layers and shape (no mount)."""

    # Regression (review, 2026-12-08): register took any list of layers. With a speculative-
    # decoding drafter vLLM registers the drafter's attention layers too (more than the
    # geometry's), and save_layer(<past the geometry>) raised IndexError out of the staging
    # in the engine's forward pass; a layer of another block size, KV head count or head size
    # was copied misplaced.
    def test_only_the_geometrys_layers_of_its_shape_are_accepted(self):
        g = GEOMETRY
        with tempfile.TemporaryDirectory() as root:
            worker = WorkerCore(config(root, plain_directory=True))
            try:
                ok = PagedCache(g, 8).layers
                cpu = [torch.zeros(8, g.kv_heads, g.engine_block_size, 2 * g.head_dim, dtype=g.dtype)
                       for _ in range(g.layers)]
                for layers in (ok, PagedCache(g, 8, kv_tuple=True).layers, cpu):
                    worker.register(layers)
                    self.assertEqual(len(worker.layers), g.layers)

                def first_of(**changed):
                    return [PagedCache(dataclasses.replace(g, **changed), 8).layers[0]] + ok[1:]

                for layers, message in (
                        (ok + ok[:1], "KV caches for 5 layers, the model .* 4 \\(the extra ones: layer 4\\)"),
                        (ok[:3], "KV caches for 3 layers, the model .* 4: "),
                        (first_of(kv_heads=4), "KV cache layer 0 holds K and V as \\[8, 16, 4, 64\\]"),
                        (first_of(head_dim=32), "KV cache layer 0 holds"),
                        (first_of(engine_block_size=32), "KV cache layer 0 holds"),
                        (ok[:3] + [torch.zeros(8, 4, 16, 128, dtype=g.dtype)], "KV cache layer 3 holds"),
                        (ok[:3] + [torch.zeros(8, 2, 16, 127, dtype=g.dtype)], "KV cache layer 3 is not a paged layer")):
                    with self.subTest(message), self.assertRaisesRegex(ValueError, message):
                        worker.register(layers)
                    self.assertIs(worker.layers[0], cpu[0])  # the last accepted cache stays
            finally:
                worker.close()


if __name__ == "__main__":
    unittest.main()
