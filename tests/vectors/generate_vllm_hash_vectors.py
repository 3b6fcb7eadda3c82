"""Regenerates tests/vectors/vllm_block_hashes.json (not run by the tests).

    PYTHONPATH=clients/python /usr/bin/python3 tests/vectors/generate_vllm_hash_vectors.py > tests/vectors/vllm_block_hashes.json

The hashes come from clients/python/gpucache/vllm_hash.py (vLLM's sha256_cbor block hashing);
tests/engine/vllm_hash_vectors_test.cc recomputes every one with its own CBOR encoder and
libcrypto's SHA-256, and clients/python/tests/test_vllm_hash.py with cbor2, so a change on
either side that breaks agreement with the other fails a test.
"""

import json
import sys

import cbor2
import torch

from gpucache.block_names import BlockNamer, ModelIdentity
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
         lora_name="sql-lora", cache_salt="acme-salt-1"),
    dict(name="seed 12345, 32-token engine blocks, 256-token gpucache blocks", seed="12345",
         engine_block_size=32, block_tokens=256, tokens=tokens(520, 3)),
]


def case(c):
    lora, salt = c.get("lora_name"), c.get("cache_salt")
    hashes = request_block_hashes(c["tokens"], c["engine_block_size"], c["seed"], lora_name=lora, cache_salt=salt)
    root = none_hash(c["seed"])
    first = (root, tuple(c["tokens"][:c["engine_block_size"]]), extra_keys_for_block(0, lora, salt))
    geometry = KVGeometry(layers=32, kv_heads=8, head_dim=128, dtype=torch.bfloat16,
                          engine_block_size=c["engine_block_size"], block_tokens=c["block_tokens"])
    namer = BlockNamer(MODEL, geometry)
    blocks = []
    for chain in namer.chains(hashes, root):
        ident = namer.identity(chain, lora or "")
        blocks.append({"chain": [h.hex() for h in chain], "identity": ident.to_json(),
                       "path": ident.relative_path()})
    return {**c, "lora_name": lora, "cache_salt": salt, "none_hash": root.hex(),
            "first_block_cbor": cbor2.dumps(first, canonical=True).hex(),
            "block_hashes": [h.hex() for h in hashes], "blocks": blocks}


json.dump({"comment": "vLLM sha256_cbor block hashes and the gpucache blocks they name "
                      "(docs/engine-integration.md, 'Block hashes'); regenerate with "
                      "tests/vectors/generate_vllm_hash_vectors.py",
           "cases": [case(c) for c in CASES]}, sys.stdout, indent=1)
sys.stdout.write("\n")
