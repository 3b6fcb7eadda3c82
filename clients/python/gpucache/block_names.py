"""From vLLM block hashes to gpucache identities (docs/engine-integration.md, "Block hashes").

One gpucache block covers `per = block_tokens / engine_block_size` engine blocks. Block j's
chain is the hash just before it (vLLM's NONE_HASH for j = 0) followed by the hashes of its
`per` engine blocks, so chain[0] commits to every earlier token and the chain to every token
of the block; two engines with the same seed, model and shard compute the same path.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional, Sequence

from .identity import CacheIdentity, float_bits
from .kv_layout import DTYPE_NAMES, LAYOUT_ABI, KVGeometry


@dataclasses.dataclass(frozen=True)
class ModelIdentity:
    """The identity fields a model and its shard contribute to every block."""

    tenant: str
    model_revision: str
    model_config_digest: str
    tokenizer_revision: str
    trust_domain: str = "local"
    quant_format: str = "none"
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    position_encoding: str = "rope"
    rope_theta: float = 10000.0
    rope_scaling: str = "none"
    rope_factor: float = 1.0
    rope_original_max_positions: int = 0
    # The identity's kv_dtype when the paged tensors' torch dtype does not say what their bytes
    # are: vLLM stores an fp8 KV cache as uint8 ("fp8_e4m3", "fp8_e5m2"). None: the name of
    # the geometry's dtype (kv_layout.DTYPE_NAMES).
    kv_dtype: Optional[str] = None
    # The identity's layout_abi (kv_layout.layout_abi): LAYOUT_ABI, or with the CPU backend's
    # ISA and a pipeline stage's layers when those change what the bytes are.
    layout_abi: str = LAYOUT_ABI


def identity_name(value: str) -> str:
    """`value` (a LoRA name, a model path: any text) as an identity name (docs/identity-encoding.md:
    at most 256 printable ASCII bytes, no space), one-to-one.

    Each UTF-8 byte outside 0x21-0x7E, and "%", becomes "%XX" (upper-case hex), so a valid name
    without "%" is itself. A result over 256 bytes is cut to 190 and followed by "%%" and the
    SHA-256 of `value` in hex (64): "%%" never occurs in an uncut result.
    """
    out = "".join(chr(b) if 0x21 <= b <= 0x7E and b != 0x25 else "%%%02X" % b for b in value.encode("utf-8"))
    if len(out) <= 256:
        return out
    return out[:190] + "%%" + hashlib.sha256(value.encode("utf-8")).hexdigest()


def kv_dtype_name(model: ModelIdentity, geometry: KVGeometry) -> str:
    """The identity's kv_dtype: model.kv_dtype, which must agree with a float geometry dtype,
    or the name of that dtype. Raises ValueError when neither names the bytes."""
    known = DTYPE_NAMES.get(geometry.dtype)
    if model.kv_dtype is None:
        if known is None:
            raise ValueError("KV dtype %s needs a name (ModelIdentity.kv_dtype)" % geometry.dtype)
        return known
    if known is not None and model.kv_dtype != known:
        raise ValueError("ModelIdentity.kv_dtype %r contradicts the KV tensors' dtype %s"
                         % (model.kv_dtype, geometry.dtype))
    return model.kv_dtype


def chain_of_block(hashes: Sequence[bytes], j: int, per: int, root: bytes) -> list[bytes]:
    """[parent, the block's engine hashes]; `hashes` must cover the whole block."""
    parent = root if j == 0 else hashes[j * per - 1]
    return [parent, *hashes[j * per:(j + 1) * per]]


class BlockNamer:
    """Identities of a request's gpucache blocks, for one model, shard and geometry."""

    def __init__(self, model: ModelIdentity, geometry: KVGeometry):
        self.model = model
        self.geometry = geometry
        self.kv_dtype = kv_dtype_name(model, geometry)

    def full_blocks(self, hashes: Sequence[bytes]) -> int:
        return len(hashes) // self.geometry.engine_blocks_per_block

    def chains(self, hashes: Sequence[bytes], root: bytes, limit: Optional[int] = None) -> list[list[bytes]]:
        n = self.full_blocks(hashes) if limit is None else min(limit, self.full_blocks(hashes))
        per = self.geometry.engine_blocks_per_block
        return [chain_of_block(hashes, j, per, root) for j in range(n)]

    def identity(self, chain: Sequence[bytes], adapter: str = "") -> CacheIdentity:
        m, g = self.model, self.geometry
        return CacheIdentity(
            tenant=m.tenant, trust_domain=m.trust_domain, model_revision=m.model_revision,
            model_config_digest=m.model_config_digest, tokenizer_revision=m.tokenizer_revision,
            adapter=adapter, chain=list(chain), kv_dtype=self.kv_dtype,
            quant_format=m.quant_format, layout_abi=m.layout_abi, tp_rank=m.tp_rank,
            tp_size=m.tp_size, pp_rank=m.pp_rank, pp_size=m.pp_size,
            position_encoding=m.position_encoding, rope_theta_bits=float_bits(m.rope_theta),
            rope_scaling=m.rope_scaling, rope_factor_bits=float_bits(m.rope_factor),
            rope_original_max_positions=m.rope_original_max_positions,
            block_capacity=g.block_tokens, valid_length=g.block_tokens)
