"""Engine adapter: the per-layer K/V of a token prefix, saved and loaded as gpucache blocks.

A prompt is cut into blocks of `block_tokens` tokens; block j holds, for every layer, the keys
then the values of its tokens, as contiguous tensors in the model's dtype (layout ABI
"gpucache-torch-kv-v1": for each layer, K then V, each [heads, tokens, head_dim], C order).
Only full blocks are saved, as vLLM does: a partial tail is recomputed.

Chain hashes (docs/engine-integration.md, "Chain hashes of the adapter"):
    root       = SHA-256("gpucache-kv-chain-v1" || model_revision || "\\0" || tokenizer_revision)
    unit u     = SHA-256(previous || token ids of the unit as little-endian uint32)
where `previous` is the root for the first unit of the prompt, else the unit before. The chain
of block j is [hash of the unit before the block (the root for j = 0), the block's unit hashes].
Every hash covers all tokens before it, so the chain stays short however long the prompt is.

Failure policy: anything that goes wrong while loading -- a miss, EIO, EBUSY, ENOTCONN, a
stored identity that is not the expected one, a size that does not match -- ends the loaded
prefix at that block; the engine recomputes from there and never uses those bytes.
"""

import dataclasses
import hashlib
import os
import struct
from typing import List, Optional, Sequence, Tuple

import torch

from .client import IDENTITY_XATTR, MountClient
from .identity import CacheIdentity

LAYOUT_ABI = "gpucache-torch-kv-v1"
KV = List[Tuple[torch.Tensor, torch.Tensor]]  # per layer: (k, v), each [heads, tokens, head_dim]

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the model contributes to every block's identity."""

    model_revision: str
    model_config_digest: str
    tokenizer_revision: str
    layers: int
    heads: int
    head_dim: int
    dtype: torch.dtype = torch.float32
    rope_theta: float = 10000.0
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1


class KVBlockAdapter:
    def __init__(self, mountpoint: str, spec: ModelSpec, *, tenant: str, trust_domain: str = "local",
                 block_tokens: int = 256, unit_tokens: int = 16):
        if block_tokens % unit_tokens:
            raise ValueError("block_tokens must be a multiple of unit_tokens")
        self.client = MountClient(mountpoint)
        self.spec = spec
        self.tenant = tenant
        self.trust_domain = trust_domain
        self.block_tokens = block_tokens
        self.unit_tokens = unit_tokens

    # ---- identities ---------------------------------------------------------------------

    def unit_hashes(self, tokens: Sequence[int]) -> List[bytes]:
        h = hashlib.sha256(b"gpucache-kv-chain-v1" + self.spec.model_revision.encode() + b"\0" +
                           self.spec.tokenizer_revision.encode()).digest()
        out = [h]  # out[i] covers the first i units
        for start in range(0, len(tokens) - self.unit_tokens + 1, self.unit_tokens):
            unit = struct.pack("<%dI" % self.unit_tokens, *tokens[start:start + self.unit_tokens])
            h = hashlib.sha256(h + unit).digest()
            out.append(h)
        return out

    def identities(self, tokens: Sequence[int]) -> List[CacheIdentity]:
        """One identity per full block of `tokens`."""
        hashes = self.unit_hashes(tokens)
        per_block = self.block_tokens // self.unit_tokens
        s = self.spec
        out = []
        for j in range(len(tokens) // self.block_tokens):
            first = j * per_block
            out.append(CacheIdentity.create(
                tenant=self.tenant, trust_domain=self.trust_domain,
                model_revision=s.model_revision, model_config_digest=s.model_config_digest,
                tokenizer_revision=s.tokenizer_revision,
                chain=hashes[first:first + per_block + 1],
                kv_dtype=_DTYPES[s.dtype], quant_format="none", layout_abi=LAYOUT_ABI,
                tp_rank=s.tp_rank, tp_size=s.tp_size, pp_rank=s.pp_rank, pp_size=s.pp_size,
                position_encoding="rope", rope_theta=s.rope_theta, rope_scaling="none",
                rope_factor=1.0, block_capacity=self.block_tokens, valid_length=self.block_tokens))
        return out

    def block_bytes(self) -> int:
        s = self.spec
        element = torch.tensor([], dtype=s.dtype).element_size()
        return s.layers * 2 * s.heads * self.block_tokens * s.head_dim * element

    # ---- save and load ------------------------------------------------------------------

    def save(self, tokens: Sequence[int], kv: KV) -> int:
        """Commits every full block of `tokens` not already stored; returns how many it wrote."""
        written = 0
        for j, identity in enumerate(self.identities(tokens)):
            lo, hi = j * self.block_tokens, (j + 1) * self.block_tokens
            parts = []
            for k, v in kv:
                parts.append(k[:, lo:hi, :].contiguous().view(-1).view(torch.uint8))
                parts.append(v[:, lo:hi, :].contiguous().view(-1).view(torch.uint8))
            try:
                self.client.commit(identity, torch.cat(parts).numpy().tobytes())
                written += 1
            except OSError:
                pass  # EEXIST (already there, or being written) or any failure: it is a cache
        return written

    def probe(self, tokens: Sequence[int]) -> int:
        """Tokens of the longest committed prefix (whole blocks), by stat() alone."""
        return self.client.probe_prefix(self.identities(tokens)) * self.block_tokens

    def load(self, tokens: Sequence[int], max_tokens: Optional[int] = None) -> Tuple[int, Optional[KV]]:
        """The longest prefix of `tokens` whose blocks load cleanly: (tokens, kv) or (0, None)."""
        limit = len(tokens) if max_tokens is None else min(max_tokens, len(tokens))
        blocks = []
        for identity in self.identities(tokens[:limit]):
            payload = self._read_verified(identity)
            if payload is None:
                break  # any failure: recompute from this block on
            blocks.append(payload)
        if not blocks:
            return 0, None
        return len(blocks) * self.block_tokens, self._to_kv(blocks)

    def _read_verified(self, identity: CacheIdentity) -> Optional[bytes]:
        path = self.client.path_of(identity)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            # The path is a digest of the identity; the stored identity must be exactly ours.
            if os.getxattr(fd, IDENTITY_XATTR) != identity.encode_physical_key():
                return None
            size = os.fstat(fd).st_size
            if size != self.block_bytes():
                return None
            data = bytearray(size)
            view = memoryview(data)
            got = 0
            while got < size:
                n = os.readv(fd, [view[got:]])
                if n <= 0:
                    return None
                got += n
            return bytes(data)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _to_kv(self, blocks: List[bytes]) -> KV:
        s = self.spec
        shape = (s.heads, self.block_tokens, s.head_dim)
        per_tensor = s.heads * self.block_tokens * s.head_dim
        layers: List[Tuple[List[torch.Tensor], List[torch.Tensor]]] = [([], []) for _ in range(s.layers)]
        for payload in blocks:
            flat = torch.frombuffer(bytearray(payload), dtype=s.dtype)
            for layer in range(s.layers):
                k0 = (2 * layer) * per_tensor
                layers[layer][0].append(flat[k0:k0 + per_tensor].view(shape))
                layers[layer][1].append(flat[k0 + per_tensor:k0 + 2 * per_tensor].view(shape))
        return [(torch.cat(ks, dim=1), torch.cat(vs, dim=1)) for ks, vs in layers]
