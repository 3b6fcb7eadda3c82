"""A real tensor engine reuses KV through the mount (label engine).

A small PyTorch transformer (examples/tiny_transformer.py) saves the KV of a prompt through
gpucache.engine.KVBlockAdapter and a second request sharing the prefix loads it. Whatever the
cache does -- hit, incompatible identity, corruption, a dead daemon -- the output must be
exactly what full recomputation gives.
"""

import os
import random
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from daemon import BUILD_DIR, Daemon  # noqa: E402
from gpucache.engine import KVBlockAdapter, ModelSpec  # noqa: E402
from tiny_transformer import TinyTransformer  # noqa: E402

BLOCK = 64


def spec_of(model, **changes):
    base = dict(model_revision="tiny-transformer@seed0", model_config_digest="sha256:tiny-d128-l2",
                tokenizer_revision="tiny-tok@1", layers=model.layers, heads=model.heads,
                head_dim=model.head_dim, dtype=torch.float32, rope_theta=model.rope_theta)
    base.update(changes)
    return ModelSpec(**base)


@unittest.skipUnless(BUILD_DIR, "set GPUCACHE_BUILD_DIR to the build directory to run")
class EngineTest(unittest.TestCase):
    def setUp(self):
        # Chunked prefill aligned to blocks (TinyTransformer.generate) makes recompute and reuse
        # run the same operations, so the comparisons below are exact, whatever the BLAS.
        self.daemon = Daemon()
        self.model = TinyTransformer(vocab=512, d_model=128, heads=4, layers=2)
        self.adapter = KVBlockAdapter(self.daemon.mnt, spec_of(self.model), tenant="acme",
                                      block_tokens=BLOCK, unit_tokens=16)
        rng = random.Random(self.id())
        self.prefix = [rng.randrange(512) for _ in range(4 * BLOCK)]
        first = self.prefix + [rng.randrange(512) for _ in range(30)]
        self.second = self.prefix + [rng.randrange(512) for _ in range(40)]
        _, _, kv = self.model.generate(first, 1, chunk=BLOCK)
        self.assertEqual(self.adapter.save(first, kv), 4)  # only the 4 full blocks
        self.expected_tokens, self.expected_logits, _ = self.model.generate(self.second, 8, chunk=BLOCK)

    def tearDown(self):
        self.daemon.close()

    def reuse(self, adapter):
        """Probe, load what loads cleanly, prefill the rest, decode."""
        cached, past = adapter.load(self.second)
        tokens, logits, _ = self.model.generate(self.second, 8, past=past, cached_tokens=cached,
                                                chunk=BLOCK)
        return cached, tokens, logits

    def test_loaded_kv_decodes_bit_identically(self):
        self.assertEqual(self.adapter.probe(self.second), 4 * BLOCK)
        cached, tokens, logits = self.reuse(self.adapter)
        self.assertEqual(cached, 4 * BLOCK)
        self.assertEqual(tokens, self.expected_tokens)
        self.assertTrue(torch.equal(logits, self.expected_logits))  # bit for bit

    def test_other_dtype_rope_or_shard_is_an_incompatible_miss(self):
        for changes in ({"dtype": torch.bfloat16}, {"rope_theta": 500000.0}, {"tp_rank": 1, "tp_size": 2}):
            with self.subTest(changes=changes):
                other = KVBlockAdapter(self.daemon.mnt, spec_of(self.model, **changes), tenant="acme",
                                       block_tokens=BLOCK, unit_tokens=16)
                self.assertEqual(other.probe(self.second), 0)
                self.assertEqual(other.load(self.second), (0, None))
                reply = other.client.lookup(other.identities(self.second)[0])
                self.assertEqual((reply["result"], reply["reason"]), ("miss", "incompatible"))

    def test_corrupted_block_makes_the_adapter_recompute(self):
        third = self.adapter.identities(self.second)[2]
        backing = os.path.join(self.daemon.data, "blocks", third.relative_path())
        with open(backing, "r+b") as f:
            f.seek(64 * 1024 + 1000)  # inside the payload
            byte = f.read(1)
            f.seek(64 * 1024 + 1000)
            f.write(bytes([byte[0] ^ 0x55]))
        cached, tokens, logits = self.reuse(self.adapter)
        self.assertEqual(cached, 2 * BLOCK)  # blocks 0 and 1 are good; 2 and after recomputed
        self.assertEqual(tokens, self.expected_tokens)
        self.assertTrue(torch.equal(logits, self.expected_logits))

    def test_daemon_stopped_mid_run_makes_the_adapter_recompute(self):
        self.daemon.kill()  # ENOTCONN from now on
        self.assertEqual(self.adapter.probe(self.second), 0)
        cached, tokens, logits = self.reuse(self.adapter)
        self.assertEqual(cached, 0)
        self.assertEqual(tokens, self.expected_tokens)
        self.assertTrue(torch.equal(logits, self.expected_logits))
        self.assertEqual(self.adapter.save(self.second, self.model.generate(self.second, 1, chunk=BLOCK)[2]), 0)


if __name__ == "__main__":
    unittest.main()
