"""vLLM block hashes and the gpucache blocks they name, against tests/vectors/vllm_block_hashes.json
(the C++ side, tests/engine/vllm_hash_vectors_test.cc, checks the same file). No mount needed."""

import json
import os
import unittest

import cbor2
import torch

from gpucache.block_names import BlockNamer, ModelIdentity
from gpucache.identity import CacheIdentity
from gpucache.kv_layout import KVGeometry
from gpucache.vllm_hash import extra_keys_for_block, none_hash, request_block_hashes, sha256_cbor

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "vectors",
                       "vllm_block_hashes.json")


def load_cases():
    with open(VECTORS) as f:
        return json.load(f)["cases"]


class VllmHashVectorsTest(unittest.TestCase):
    def test_block_hashes_match_the_vectors(self):
        for v in load_cases():
            with self.subTest(v["name"]):
                self.assertEqual(none_hash(v["seed"]).hex(), v["none_hash"])
                hashes = request_block_hashes(v["tokens"], v["engine_block_size"], v["seed"],
                                              lora_name=v["lora_name"], cache_salt=v["cache_salt"])
                self.assertEqual([h.hex() for h in hashes], v["block_hashes"])

    def test_first_block_preimage_is_the_canonical_cbor_of_vllms_tuple(self):
        for v in load_cases():
            with self.subTest(v["name"]):
                extra = extra_keys_for_block(0, v["lora_name"], v["cache_salt"])
                value = (bytes.fromhex(v["none_hash"]), tuple(v["tokens"][:v["engine_block_size"]]), extra)
                self.assertEqual(cbor2.dumps(value, canonical=True).hex(), v["first_block_cbor"])
                self.assertEqual(sha256_cbor(value).hex(), v["block_hashes"][0])

    def test_chains_and_paths_match_the_vectors(self):
        for v in load_cases():
            with self.subTest(v["name"]):
                hashes = [bytes.fromhex(h) for h in v["block_hashes"]]
                for j, b in enumerate(v["blocks"]):
                    ident = CacheIdentity.from_json(b["identity"])
                    self.assertEqual([h.hex() for h in ident.chain], b["chain"])
                    self.assertEqual(ident.relative_path(), b["path"])
                    per = v["block_tokens"] // v["engine_block_size"]
                    parent = hashes[j * per - 1] if j else bytes.fromhex(v["none_hash"])
                    self.assertEqual(ident.chain, [parent] + hashes[j * per:(j + 1) * per])

    def test_the_namer_builds_the_vector_identities(self):
        ident0 = CacheIdentity.from_json(load_cases()[0]["blocks"][0]["identity"])
        model = ModelIdentity(tenant=ident0.tenant, trust_domain=ident0.trust_domain,
                              model_revision=ident0.model_revision,
                              model_config_digest=ident0.model_config_digest,
                              tokenizer_revision=ident0.tokenizer_revision, tp_rank=ident0.tp_rank,
                              tp_size=ident0.tp_size, rope_theta=ident0.rope_theta,
                              rope_scaling=ident0.rope_scaling, rope_factor=ident0.rope_factor,
                              rope_original_max_positions=ident0.rope_original_max_positions)
        for v in load_cases():
            with self.subTest(v["name"]):
                g = KVGeometry(layers=32, kv_heads=8, head_dim=128, dtype=torch.bfloat16,
                               engine_block_size=v["engine_block_size"], block_tokens=v["block_tokens"])
                namer = BlockNamer(model, g)
                hashes = [bytes.fromhex(h) for h in v["block_hashes"]]
                chains = namer.chains(hashes, bytes.fromhex(v["none_hash"]))
                paths = [namer.identity(c, v["lora_name"] or "").relative_path() for c in chains]
                self.assertEqual(paths, [b["path"] for b in v["blocks"]])

    def test_salt_and_lora_change_every_hash_and_the_seed_the_root(self):
        tokens = list(range(64))
        plain = request_block_hashes(tokens, 16, "0")
        for kw in ({"cache_salt": "s"}, {"lora_name": "l"}):
            other = request_block_hashes(tokens, 16, "0", **kw)
            self.assertTrue(all(a != b for a, b in zip(plain, other)), kw)
        self.assertNotEqual(request_block_hashes(tokens, 16, "1")[0], plain[0])
        self.assertEqual(request_block_hashes(tokens + [1, 2], 16, "0"), plain)  # only full blocks


if __name__ == "__main__":
    unittest.main()
