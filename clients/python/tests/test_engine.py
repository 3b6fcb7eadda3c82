"""A real tensor engine reuses KV through the mount with the connector (label engine).

A small PyTorch transformer (examples/tiny_transformer.py) runs on the harness engine
(engine_harness.py: vLLM's call order, a paged KV cache, chunked prefill aligned to blocks).
Request 1 saves the KV of a prompt; request 2 shares the prefix and loads it layer by layer.
Whatever the cache does -- hit, incompatible identity, corruption, a dead daemon -- the output
must be exactly what full recomputation gives.
"""

import os
import random
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from connector_support import backing_path  # noqa: E402
from daemon import BUILD_DIR, Daemon  # noqa: E402
from engine_harness import Request  # noqa: E402
from gpucache.client import MountClient  # noqa: E402
from gpucache.block_names import BlockNamer  # noqa: E402
from gpucache.vllm_hash import none_hash, request_block_hashes  # noqa: E402
from kv_reuse_demo import connector_config, make_engine, run  # noqa: E402
from tiny_transformer import TinyTransformer  # noqa: E402

BLOCK = 64


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class EngineTest(unittest.TestCase):
    def setUp(self):
        # Chunked prefill aligned to blocks makes recompute and reuse run the same operations,
        # so the comparisons below are exact, whatever the BLAS.
        self.daemon = Daemon()
        self.model = TinyTransformer(vocab=512, d_model=128, heads=4, layers=2)
        self.config = self.config_with()
        rng = random.Random(self.id())
        self.prefix = [rng.randrange(512) for _ in range(4 * BLOCK)]
        first = self.prefix + [rng.randrange(512) for _ in range(30)]
        self.second = self.prefix + [rng.randrange(512) for _ in range(40)]
        saver = make_engine(self.model, self.config, num_blocks=128, chunk=BLOCK)
        run(saver, Request("first", first))
        self.assertEqual(saver.worker.stats.committed_blocks, 4)  # only the 4 full blocks
        self.expected_tokens, self.expected_logits, _ = self.model.generate(self.second, 8, chunk=BLOCK)

    def tearDown(self):
        self.daemon.close()

    def config_with(self, **changes):
        return connector_config(self.daemon.mnt, "acme", self.model, block_tokens=BLOCK, **changes)

    def reuse(self, config):
        return run(make_engine(self.model, config, num_blocks=128, chunk=BLOCK),
                   Request("second", self.second, max_new_tokens=8))

    def assert_same_as_recompute(self, req):
        self.assertEqual(req.output, self.expected_tokens)
        self.assertTrue(torch.equal(req.first_logits, self.expected_logits))  # bit for bit

    def identities(self, config):
        namer = BlockNamer(config.model, config.geometry)
        hashes = request_block_hashes(self.second, 16, "0")
        return [namer.identity(c) for c in namer.chains(hashes, none_hash("0"))]

    def test_loaded_kv_decodes_bit_identically(self):
        req = self.reuse(self.config)
        self.assertEqual(req.loaded_tokens, 4 * BLOCK)
        self.assert_same_as_recompute(req)

    def test_other_dtype_rope_or_shard_is_an_incompatible_miss(self):
        for changes in ({"dtype": torch.bfloat16}, {"rope_theta": 500000.0}, {"tp_rank": 1, "tp_size": 2}):
            with self.subTest(changes=changes):
                other = self.config_with(**changes)
                engine = make_engine(self.model, other, num_blocks=128, chunk=BLOCK)
                self.assertEqual(engine.scheduler.lookup(Request("x", self.second).view(), 0), (0, False))
                reply = MountClient(self.daemon.mnt).lookup(self.identities(other)[0])
                self.assertEqual((reply["result"], reply["reason"]), ("miss", "incompatible"))

    def test_corrupted_block_makes_the_engine_recompute(self):
        with open(backing_path(self.daemon, self.identities(self.config)[2]), "r+b") as f:
            f.seek(64 * 1024 + 1000)  # inside the payload
            byte = f.read(1)
            f.seek(64 * 1024 + 1000)
            f.write(bytes([byte[0] ^ 0x55]))
        req = self.reuse(self.config)
        self.assertEqual(req.loaded_tokens, 2 * BLOCK)  # blocks 0 and 1 are good; 2 and after recomputed
        self.assert_same_as_recompute(req)

    # Regression (review, 2026-12-06): the step that found a block bad still computed the next
    # block attending to the slots the load never filled, and committed it: wrong KV under a
    # right name, served to every engine that later shares the prefix.
    def test_a_block_computed_over_a_failed_load_is_never_stored(self):
        rng = random.Random("longer")
        longer = self.prefix + [rng.randrange(512) for _ in range(BLOCK + 10)]  # block 4 is new
        with open(backing_path(self.daemon, self.identities(self.config)[2]), "r+b") as f:
            f.seek(64 * 1024 + 1000)  # inside the payload: found when the load reads it
            byte = f.read(1)
            f.seek(64 * 1024 + 1000)
            f.write(bytes([byte[0] ^ 0x55]))
        engine = make_engine(self.model, self.config, num_blocks=128, chunk=BLOCK)
        req = run(engine, Request("second", longer, max_new_tokens=2))
        self.assertEqual(req.rewinds, 1)
        self.assertEqual(engine.worker.stats.skipped_commits.get("load-failed"), 1)  # block 4, that step
        # Whatever is stored now is what recomputation gives: a later request over the five
        # blocks loads them all and decodes bit for bit as recomputation does.
        later = longer[:5 * BLOCK] + [7, 8, 9]
        expected_tokens, expected_logits, _ = self.model.generate(later, 4, chunk=BLOCK)
        third = run(make_engine(self.model, self.config, num_blocks=128, chunk=BLOCK),
                    Request("third", later, max_new_tokens=4))
        self.assertEqual(third.loaded_tokens, 5 * BLOCK)
        self.assertEqual(third.output, expected_tokens)
        self.assertTrue(torch.equal(third.first_logits, expected_logits))

    def test_daemon_stopped_mid_run_makes_the_engine_recompute(self):
        self.daemon.kill()  # ENOTCONN from now on
        req = self.reuse(self.config)
        self.assertEqual(req.loaded_tokens, 0)
        self.assert_same_as_recompute(req)


if __name__ == "__main__":
    unittest.main()
