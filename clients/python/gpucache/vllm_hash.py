"""vLLM V1's block hashes (prefix caching with `sha256_cbor`), computed without vLLM.

vLLM hashes a request's tokens one full engine block (`block_size` tokens, e.g. 16) at a time:

    NONE_HASH  = sha256(CBOR(str(PYTHONHASHSEED)))                      the chain's root
    hash_i     = sha256(CBOR((hash_{i-1} or NONE_HASH, tuple(tokens of block i), extra_keys_i)))

CBOR is cbor2's canonical encoding: a tuple is an array, bytes a byte string, str a text
string, an int the shortest head, None the simple value null. `extra_keys_i` is None or a tuple
of tagged keys, in this order (vLLM 0.32, vllm/v1/core/kv_cache_utils.py,
generate_block_hash_extra_keys):

    ("lora", lora_name, lora_path)        every block of a request with a LoRA adapter
    ("mm", identifier, offset)            each multimodal input overlapping the block
    ("cache_salt", salt)                  block 0 only, when the request has a salt
    ("prompt_embeds", sha256 digest)      every block of a request with prompt embeddings

Only the LoRA and cache-salt keys are built here (the connector does not cache requests with
multimodal inputs or prompt embeddings); multimodal keys can be passed in per block.
docs/engine-integration.md, "Block hashes", says how gpucache chains are derived from these;
tests/vectors/vllm_block_hashes.json pins them for C++ and Python, and test_vllm_hash checks
them against the installed vLLM's own hasher when vLLM is importable.

Two engines agree on hashes (and so on gpucache paths) only with the same PYTHONHASHSEED (vLLM
0.32 falls back to the fixed seed "vllm-none-hash" for sha256 algorithms when it is unset; the
connector asks for the seed explicitly).
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional, Sequence, Tuple

import cbor2


def sha256_cbor(value: Any) -> bytes:
    """vLLM's `sha256_cbor` (vllm/utils/hashing.py)."""
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def none_hash(seed: str) -> bytes:
    """The parent of a request's first block: vLLM's NONE_HASH for PYTHONHASHSEED=seed."""
    return sha256_cbor(seed)


def hash_block_tokens(parent: Optional[bytes], tokens: Sequence[int],
                      extra_keys: Optional[Tuple[Any, ...]], root: bytes) -> bytes:
    """vLLM's `hash_block_tokens`: the hash of one full block and everything before it."""
    return sha256_cbor((parent or root, tuple(tokens), extra_keys))


def extra_keys_for_block(index: int, lora_name: Optional[str], cache_salt: Optional[str],
                         more: Sequence[Any] = (), *,
                         lora_path: Optional[str] = None) -> Optional[Tuple[Any, ...]]:
    """`generate_block_hash_extra_keys` for LoRA and cache salt (plus caller-given keys).

    The order is vLLM's: the LoRA key (name and path: a name re-pointed at other weights is
    another adapter), then multimodal keys (in `more`), then the salt, which only block 0
    carries: every later hash covers it through the chain.
    """
    keys: list[Any] = [("lora", lora_name, lora_path or "")] if lora_name is not None else []
    keys.extend(more)
    if index == 0 and cache_salt:
        keys.append(("cache_salt", cache_salt))
    return tuple(keys) if keys else None


def request_block_hashes(tokens: Sequence[int], block_size: int, seed: str, *,
                         lora_name: Optional[str] = None, lora_path: Optional[str] = None,
                         cache_salt: Optional[str] = None) -> list[bytes]:
    """The hashes vLLM stores in `request.block_hashes`: one per full block of `tokens`."""
    root = none_hash(seed)
    hashes: list[bytes] = []
    parent: Optional[bytes] = None
    for index in range(len(tokens) // block_size):
        block = tokens[index * block_size:(index + 1) * block_size]
        extra = extra_keys_for_block(index, lora_name, cache_salt, lora_path=lora_path)
        parent = hash_block_tokens(parent, block, extra, root)
        hashes.append(parent)
    return hashes
