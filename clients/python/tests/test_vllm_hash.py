"""vLLM block hashes and the gpucache blocks they name, against tests/vectors/vllm_block_hashes.json
(the C++ side, tests/engine/vllm_hash_vectors_test.cc, checks the same file). No mount needed."""

import json
import os
import unittest
from unittest import mock
from urllib.parse import unquote

import cbor2
import torch

from gpucache.block_names import BlockNamer, ModelIdentity, identity_name
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
                                              lora_name=v["lora_name"], lora_path=v["lora_path"],
                                              cache_salt=v["cache_salt"])
                self.assertEqual([h.hex() for h in hashes], v["block_hashes"])

    def test_first_block_preimage_is_the_canonical_cbor_of_vllms_tuple(self):
        for v in load_cases():
            with self.subTest(v["name"]):
                extra = extra_keys_for_block(0, v["lora_name"], v["cache_salt"], lora_path=v["lora_path"])
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
                self.assertEqual(identity_name(v["lora_name"] or ""), v["adapter"])
                paths = [namer.identity(c, v["adapter"]).relative_path() for c in chains]
                self.assertEqual(paths, [b["path"] for b in v["blocks"]])

    def test_salt_and_lora_change_every_hash_and_the_seed_the_root(self):
        tokens = list(range(64))
        plain = request_block_hashes(tokens, 16, "0")
        for kw in ({"cache_salt": "s"}, {"lora_name": "l", "lora_path": "/a/l"}):
            other = request_block_hashes(tokens, 16, "0", **kw)
            self.assertTrue(all(a != b for a, b in zip(plain, other)), kw)
        self.assertNotEqual(request_block_hashes(tokens, 16, "1")[0], plain[0])
        self.assertEqual(request_block_hashes(tokens + [1, 2], 16, "0"), plain)  # only full blocks

    # Regression (review, 2026-12-06): an adapter was hashed by its name alone (vLLM hashes
    # ("lora", name, path)): a LoRA name re-pointed at other weights named the same blocks and
    # loaded KV computed with the old adapter, and no LoRA or salted hash equalled vLLM's.
    def test_the_lora_path_is_hashed_with_the_name_as_tagged_keys(self):
        tokens = list(range(64))
        v1 = request_block_hashes(tokens, 16, "0", lora_name="sql", lora_path="/adapters/sql-v1")
        v2 = request_block_hashes(tokens, 16, "0", lora_name="sql", lora_path="/adapters/sql-v2")
        self.assertTrue(all(a != b for a, b in zip(v1, v2)))
        self.assertEqual(extra_keys_for_block(0, "sql", "s", lora_path="/adapters/sql-v1"),
                         (("lora", "sql", "/adapters/sql-v1"), ("cache_salt", "s")))
        self.assertEqual(extra_keys_for_block(1, "sql", "s", lora_path="/p"), (("lora", "sql", "/p"),))
        self.assertIsNone(extra_keys_for_block(1, None, "s"))
        cases = {v["name"]: v for v in load_cases()}
        self.assertNotEqual(cases["lora and cache salt"]["block_hashes"][1],
                            cases["the same lora name at another path"]["block_hashes"][1])


class IdentityNameTest(unittest.TestCase):
    # Regression (review, 2026-12-06): a LoRA name (or model path) with a space or a non-ASCII
    # character was put in the identity as is; validation raised ValueError inside vLLM's
    # scheduler (get_num_new_matched_tokens) for every such request.
    def test_any_text_becomes_a_valid_name_one_to_one(self):
        samples = ["sql-v1", "my adapter", "adaptér", "100%", "%25", "a%%b", "", "x" * 256, "x" * 257,
                   "é" * 200, "é" * 200 + "!", "/models/My Model@local-1", "\t\n\x7f~!"]
        names = [identity_name(t) for t in samples]
        self.assertEqual(len(set(names)), len(samples))
        for text, name in zip(samples, names):
            with self.subTest(text=text):
                self.assertLessEqual(len(name), 256)
                self.assertTrue(all("\x21" <= c <= "\x7e" for c in name), name)
                if "%%" not in name:  # not cut: percent-decodes back to the text
                    self.assertEqual(unquote(name, errors="strict"), text)
        self.assertEqual(identity_name("sql-v1"), "sql-v1")  # valid names without % are unchanged
        self.assertEqual(identity_name("my adaptér"), "my%20adapt%C3%A9r")
        self.assertEqual(sum("%%" in n for n in names), 3)  # the three over 256 bytes encoded


def vllm_hasher():
    """The installed vLLM's request block hasher and Request builder, or None without vLLM."""
    try:
        from vllm.lora.request import LoRARequest
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256_cbor as vllm_sha256_cbor
        from vllm.v1.core import kv_cache_utils
        from vllm.v1.request import Request
    except ImportError:
        return None

    def hashes(tokens, block_size, seed, lora=None, cache_salt=None):
        with mock.patch.dict(os.environ, {"PYTHONHASHSEED": seed}):
            kv_cache_utils.init_none_hash(vllm_sha256_cbor)
        request = Request(request_id="r", prompt_token_ids=list(tokens),
                          sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                          lora_request=LoRARequest(lora[0], 1, lora[1]) if lora else None,
                          cache_salt=cache_salt)
        return [bytes(h) for h in kv_cache_utils.get_request_block_hasher(block_size, vllm_sha256_cbor)(request)]
    return hashes


VLLM_HASHES = vllm_hasher()
if VLLM_HASHES is None and os.environ.get("GPUCACHE_REQUIRE_VLLM"):
    # ctest python_vllm_hash_in_venv: build/venv has vLLM, so its absence is a failure there.
    raise RuntimeError("GPUCACHE_REQUIRE_VLLM is set but vLLM cannot be imported")


@unittest.skipIf(VLLM_HASHES is None, "vLLM is not installed")
class AgainstInstalledVllmTest(unittest.TestCase):
    """vllm_hash.py and the vectors against the installed vLLM's own hashing (build/venv)."""

    # Regression (review, 2026-12-06): vLLM keys LoRA as ("lora", name, path) and the salt as
    # ("cache_salt", salt); gpucache hashed the bare name and salt, so its "vLLM block hashes"
    # differed from request.block_hashes for every LoRA or salted request.
    def test_request_block_hashes_equal_vllms(self):
        tokens = [(i * 7919) % 128256 for i in range(150)]
        for seed, size, lora, salt in (("0", 16, None, None), ("0", 16, None, "salt"),
                                       ("0", 16, ("sql", "/adapters/sql-v1"), None),
                                       ("7", 32, ("sql", "/adapters/sql-v2"), "salt"),
                                       ("0", 16, ("adaptér name", "/adapters/é"), "sel é")):
            with self.subTest(seed=seed, lora=lora, salt=salt):
                ours = request_block_hashes(tokens, size, seed, lora_name=lora and lora[0],
                                            lora_path=lora and lora[1], cache_salt=salt)
                self.assertEqual(ours, VLLM_HASHES(tokens, size, seed, lora, salt))

    def test_the_vectors_are_vllms(self):
        for v in load_cases():
            with self.subTest(v["name"]):
                lora = (v["lora_name"], v["lora_path"]) if v["lora_name"] is not None else None
                hashes = VLLM_HASHES(v["tokens"], v["engine_block_size"], v["seed"], lora, v["cache_salt"])
                self.assertEqual([h.hex() for h in hashes], v["block_hashes"])


if __name__ == "__main__":
    unittest.main()
