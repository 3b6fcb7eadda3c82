"""Regenerates tests/vectors/vllm_block_hashes.json (not run by the tests).

    PYTHONPATH=clients/python build/venv/bin/python tests/vectors/generate_vllm_hash_vectors.py \
        > tests/vectors/vllm_block_hashes.json

The block hashes come from vLLM itself (build/venv's pinned vLLM: its request block hasher with
sha256_cbor, on real Request and LoRARequest objects), and the script stops unless
clients/python/gpucache/vllm_hash.py computes the same ones. tests/engine/vllm_hash_vectors_test.cc
recomputes every one with its own CBOR encoder and libcrypto's SHA-256, and
clients/python/tests/test_vllm_hash.py with cbor2, so a change on either side that breaks
agreement with vLLM or with the other fails a test.
"""

import json
import os
import sys

import cbor2
import torch

from gpucache.block_names import BlockNamer, ModelIdentity, identity_name
from gpucache.kv_layout import KVGeometry
from gpucache.vllm_hash import extra_keys_for_block, none_hash, request_block_hashes

MODEL = ModelIdentity(tenant="acme", trust_domain="prod", model_revision="meta-llama/Llama-3.1-8B@5206a32",
                      model_config_digest="sha256:3f2a9c", tokenizer_revision="llama3-tok@5206a32",
                      tp_rank=0, tp_size=2, rope_theta=500000.0, rope_scaling="llama3", rope_factor=8.0,
                      rope_original_max_positions=8192)

# Token ids at every CBOR head size: 1 byte (< 24), +1, +2, +4 bytes.
EDGES = [0, 1, 23, 24, 255, 256, 65535, 65536, 128255, 4294967295]


def tokens(n, salt):
    out = [(i * 7919 + salt * 104729) % 128256 for i in range(n)]
    out[:len(EDGES)] = EDGES
    return out


CASES = [
    dict(name="no extra keys", seed="0", engine_block_size=16, block_tokens=64, tokens=tokens(150, 1)),
    dict(name="lora and cache salt", seed="0", engine_block_size=16, block_tokens=64, tokens=tokens(130, 2),
         lora_name="sql-lora", lora_path="/adapters/sql-lora-2024-06", cache_salt="acme-salt-1"),
    dict(name="the same lora name at another path", seed="0", engine_block_size=16, block_tokens=64,
         tokens=tokens(130, 2), lora_name="sql-lora", lora_path="/adapters/sql-lora-2024-09"),
    dict(name="a lora name with a space and non-ASCII characters", seed="0", engine_block_size=16,
         block_tokens=64, tokens=tokens(70, 5), lora_name="sql adaptér 100%", lora_path="/adapters/sql adaptér"),
    dict(name="cache salt only", seed="0", engine_block_size=16, block_tokens=64, tokens=tokens(70, 4),
         cache_salt="acme-salt-2"),
    dict(name="seed 12345, 32-token engine blocks, 256-token gpucache blocks", seed="12345",
         engine_block_size=32, block_tokens=256, tokens=tokens(520, 3)),
]


def vllm_block_hashes(c):
    """request.block_hashes as the pinned vLLM computes them (sha256_cbor)."""
    os.environ["PYTHONHASHSEED"] = c["seed"]
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256_cbor as vllm_sha256_cbor
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.request import Request
    kv_cache_utils.init_none_hash(vllm_sha256_cbor)
    lora = LoRARequest(c["lora_name"], 1, c["lora_path"]) if c.get("lora_name") else None
    request = Request(request_id="r", prompt_token_ids=c["tokens"], sampling_params=SamplingParams(max_tokens=1),
                      pooling_params=None, lora_request=lora, cache_salt=c.get("cache_salt"))
    hasher = kv_cache_utils.get_request_block_hasher(c["engine_block_size"], vllm_sha256_cbor)
    return [bytes(h) for h in hasher(request)]


def case(c):
    lora, path, salt = c.get("lora_name"), c.get("lora_path"), c.get("cache_salt")
    hashes = vllm_block_hashes(c)
    ours = request_block_hashes(c["tokens"], c["engine_block_size"], c["seed"], lora_name=lora, lora_path=path,
                                cache_salt=salt)
    if ours != hashes:
        sys.exit("gpucache/vllm_hash.py disagrees with vLLM on case %r" % c["name"])
    root = none_hash(c["seed"])
    first = (root, tuple(c["tokens"][:c["engine_block_size"]]),
             extra_keys_for_block(0, lora, salt, lora_path=path))
    geometry = KVGeometry(layers=32, kv_heads=8, head_dim=128, dtype=torch.bfloat16,
                          engine_block_size=c["engine_block_size"], block_tokens=c["block_tokens"])
    namer = BlockNamer(MODEL, geometry)
    blocks = []
    adapter = identity_name(lora or "")  # the identity's adapter field
    for chain in namer.chains(hashes, root):
        ident = namer.identity(chain, adapter)
        blocks.append({"chain": [h.hex() for h in chain], "identity": ident.to_json(),
                       "path": ident.relative_path()})
    return {**c, "lora_name": lora, "lora_path": path, "cache_salt": salt, "adapter": adapter,
            "none_hash": root.hex(),
            "first_block_cbor": cbor2.dumps(first, canonical=True).hex(),
            "block_hashes": [h.hex() for h in hashes], "blocks": blocks}


json.dump({"comment": "vLLM sha256_cbor block hashes and the gpucache blocks they name "
                      "(docs/engine-integration.md, 'Block hashes'); regenerate with "
                      "tests/vectors/generate_vllm_hash_vectors.py",
           "cases": [case(c) for c in CASES]}, sys.stdout, indent=1)
sys.stdout.write("\n")
