"""The layer-wise block payload and vLLM's paged KV cache (layout ABI gpucache-layerwise-nhd-v1).

A gpucache block holds `block_tokens` tokens (a whole number of engine blocks). Its payload is
one region per layer, in layer order, each starting at a multiple of 4096 bytes (adr/0011):

    region l = K[block_tokens, kv_heads, head_dim] then V[block_tokens, kv_heads, head_dim]
               (C order, the model's dtype), zero padding up to `layer_stride`

That is exactly what vLLM's paged layer `[2, num_blocks, block_size, kv_heads, head_dim]` holds
for the block's engine blocks, K half then V half, so loading a layer of n blocks is one
`preadv` per block into a staging tensor `[2, n * blocks_per_block, block_size, heads, dim]`
and one row-wise copy per half into the paged cache (scatter), and saving is one
`index_select` per half into staging (gather) and one `writev` per block.

vLLM's CPU backend (CPU_ATTN) keeps a layer as one tensor `[num_blocks, kv_heads, block_size,
2 * head_dim]`, read here as K[block_size, head_dim] then V per (block, head): strided views
`[num_blocks, block_size, heads, dim]`, copied with torch's strided index ops. But what CPU_ATTN
stores there depends on the instruction set it picks per engine (vLLM's `_get_attn_isa`: "amx"
packs K and V for its tiles, "vec", "vec16", "neon" ... do not), so its block files are
byte-for-byte that ISA's arrangement, not the layout above, and differ between ISAs. So they
are named apart: layout_abi() adds the ISA to the layout name (a non-AMX engine never loads an
AMX engine's blocks). It also adds a pipeline stage's layer range, which fixes which layers
the regions hold. A GPU engine with one stage keeps the plain name LAYOUT_ABI.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Protocol, Sequence, Tuple, Union, cast

import torch

if TYPE_CHECKING:
    import numpy
    import numpy.typing

LAYOUT_ABI = "gpucache-layerwise-nhd-v1"
CPU_ISA_TAG = "+cpu-"
PAGE = 4096


def layout_abi(cpu_isa: Optional[str] = None, layers: Optional[Tuple[int, int]] = None) -> str:
    """The identity's layout_abi: LAYOUT_ABI, then "+cpu-<isa>" for vLLM's CPU backend (whose
    arrangement depends on its ISA) and "+layers-<start>-<end>" for a pipeline stage holding
    layers [start, end) of the model (so two splits never share a name)."""
    name = LAYOUT_ABI
    if cpu_isa:
        name += CPU_ISA_TAG + cpu_isa
    if layers is not None:
        name += "+layers-%d-%d" % layers
    return name

# Per layer: one tensor [2, num_blocks, block_size, heads, dim], or vLLM's (K, V) pair of
# [num_blocks, block_size, heads, dim] tensors, or the CPU backend's one 4-D tensor
# [num_blocks, heads, block_size, 2 * dim] (K then V per block and head).
PagedLayer = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]

DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


@dataclasses.dataclass(frozen=True)
class KVGeometry:
    """What fixes the byte layout of one block (all of it is in the identity)."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    engine_block_size: int  # tokens per engine (vLLM) block, e.g. 16
    block_tokens: int  # tokens per gpucache block, a multiple of engine_block_size

    def __post_init__(self) -> None:
        if self.block_tokens % self.engine_block_size:
            raise ValueError("block_tokens must be a multiple of engine_block_size")
        if self.engine_blocks_per_block + 1 > 128:
            raise ValueError("a chain holds at most 127 engine block hashes plus the parent")

    @property
    def engine_blocks_per_block(self) -> int:
        return self.block_tokens // self.engine_block_size

    @property
    def element_size(self) -> int:
        return torch.tensor([], dtype=self.dtype).element_size()

    @property
    def half_bytes(self) -> int:
        """K (or V) of one layer of one block."""
        return self.block_tokens * self.kv_heads * self.head_dim * self.element_size

    @property
    def layer_stride(self) -> int:
        return round_up(2 * self.half_bytes, PAGE)

    @property
    def payload_bytes(self) -> int:
        return self.layers * self.layer_stride

    def staging(self, blocks: int, pin: bool) -> torch.Tensor:
        """One layer of `blocks` blocks, shaped for the paged cache's block dimension."""
        shape = (2, blocks * self.engine_blocks_per_block, self.engine_block_size,
                 self.kv_heads, self.head_dim)
        return torch.empty(shape, dtype=self.dtype, pin_memory=pin)

    def block_halves(self, staging: torch.Tensor, block: int) -> List[memoryview]:
        """The two byte buffers (K, V) of `block` in a staging tensor, for preadv/pwritev."""
        per = self.engine_blocks_per_block
        k = staging[0, block * per:(block + 1) * per]
        v = staging[1, block * per:(block + 1) * per]
        return [_bytes_view(k), _bytes_view(v)]


def _bytes_view(t: torch.Tensor) -> memoryview:
    # A contiguous slice of a contiguous tensor: its numpy view shares the memory, so the
    # kernel reads straight into (or writes straight from) the tensor. bfloat16 has no numpy
    # dtype, hence the uint8 reinterpretation first.
    # (numpy's stubs give ndarray its buffer protocol only for Python 3.12 and later.)
    return memoryview(cast(Any, t.view(torch.uint8).numpy())).cast("B")


# vLLM's attention backends whose layer tensor the connector knows how to read, by how they
# split one 4-D tensor [num_blocks, kv_heads, block_size, 2 * head_dim] into K and V: CPU_ATTN
# per (block, head) (K[block_size, dim] then V), FLASH_ATTN per token (K[dim] then V[dim]).
# The connector copies each as it is; CPU_ATTN's bytes also depend on its ISA, which the
# layout name then says (layout_abi). Any other backend is refused, not guessed: the same
# shape can mean another order, and a wrong guess stores and serves misplaced KV.
KNOWN_BACKENDS = ("CPU_ATTN", "FLASH_ATTN")


def paged_layer_form(backend: str) -> Callable[[Any], PagedLayer]:
    """How to view a layer's cache tensor of `backend` as a PagedLayer. ValueError if unknown."""
    if backend == "CPU_ATTN":
        return _as_is
    if backend == "FLASH_ATTN":
        return _split_per_token
    raise ValueError("gpucache: the KV cache layout of attention backend %r is not known to the "
                     "connector (known: %s); run the engine with one of those" % (backend, ", ".join(KNOWN_BACKENDS)))


def _as_is(kv_cache: Any) -> PagedLayer:
    return cast(PagedLayer, kv_cache)


def _split_per_token(kv_cache: Any) -> PagedLayer:
    """[num_blocks, heads, block_size, 2 * dim] -> (K, V), each a [num_blocks, block_size, heads,
    dim] view, as FLASH_ATTN splits it."""
    if not isinstance(kv_cache, torch.Tensor) or kv_cache.dim() != 4:
        raise ValueError("gpucache: FLASH_ATTN's layer cache was expected as one 4-D tensor")
    dim = kv_cache.shape[-1] // 2
    per_token = kv_cache.transpose(1, 2)
    return (per_token[..., :dim], per_token[..., dim:])


def engine_block_ids(ids: Sequence[int]) -> torch.Tensor:
    return torch.as_tensor(list(ids), dtype=torch.long)


def halves(layer: PagedLayer) -> Tuple[torch.Tensor, torch.Tensor]:
    """K and V of a paged layer, each [num_blocks, block_size, heads, dim], in any form."""
    if isinstance(layer, torch.Tensor) and layer.dim() == 4:  # CPU_ATTN
        blocks, heads, block_size, two_dim = layer.shape
        both = layer.view(blocks, heads, 2, block_size, two_dim // 2)
        return both[:, :, 0].transpose(1, 2), both[:, :, 1].transpose(1, 2)
    return (layer[0], layer[1])


def check_paged_layers(geometry: KVGeometry, layers: Sequence[PagedLayer],
                       names: Optional[Sequence[str]] = None) -> None:
    """ValueError unless `layers` is one paged layer per layer of `geometry`, each of its block
    size, KV heads and head size: the staging, the block payload and the identity are sized by
    the geometry, so a layer past its count (a speculative-decoding drafter's) would be indexed
    past the staging in the forward pass, and a layer of another shape copied misplaced."""
    g = geometry
    label = list(names) if names is not None else ["layer %d" % i for i in range(len(layers))]
    if len(layers) != g.layers:
        extra = label[g.layers:]
        raise ValueError(
            "gpucache: the engine has KV caches for %d layers, the model (the connector's "
            "geometry) %d%s: speculative decoding with a drafter that has KV caches of its own "
            "(EAGLE, MTP, a draft model) is not supported, nor a model whose layers are not all "
            "attention layers with a KV cache of their own"
            % (len(layers), g.layers, " (the extra ones: %s)" % ", ".join(extra) if extra else ""))
    expected = (g.engine_block_size, g.kv_heads, g.head_dim)
    for name, layer in zip(label, layers):
        try:
            k, v = halves(layer)
            shapes = [tuple(k.shape), tuple(v.shape)]
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            raise ValueError("gpucache: KV cache %s is not a paged layer the connector can read: %s"
                             % (name, e)) from e
        if any(len(s) != 4 or s[1:] != expected for s in shapes) or shapes[0] != shapes[1]:
            raise ValueError(
                "gpucache: KV cache %s holds K and V as %s and %s [blocks, block_size, kv_heads, "
                "head_dim], the connector expected [blocks, %d, %d, %d] (vLLM's block_size, the "
                "model's KV heads on this TP rank, its head size)"
                % (name, list(shapes[0]), list(shapes[1]), *expected))


def scatter(layer: PagedLayer, ids: torch.Tensor, staging: torch.Tensor) -> None:
    """Copies staging[:, i] into engine block ids[i] of the paged layer: one op per half."""
    with torch.inference_mode():  # see gather
        _scatter(layer, ids, staging)


def _scatter(layer: PagedLayer, ids: torch.Tensor, staging: torch.Tensor) -> None:
    for half, src in zip(halves(layer), staging):
        if half.device.type == "cpu" and half.is_contiguous():
            _rows(half)[ids.numpy()] = _rows(src)
        elif half.device.type == "cpu":  # a strided view (CPU_ATTN)
            half.index_copy_(0, ids, src)
        else:  # a device cache: one (asynchronous, from pinned memory) copy per half
            half.index_copy_(0, ids.to(half.device), src.to(half.device, non_blocking=True))


def _rows(t: torch.Tensor) -> numpy.typing.NDArray[numpy.uint8]:
    # torch 1.13's CPU index_copy_ copies element by element (0.4 GB/s here, against 4.4 for
    # numpy's row-wise fancy assignment, which moves each engine block with one memcpy).
    return t.view(torch.uint8).numpy().reshape(t.shape[0], -1)


def gather(layer: PagedLayer, ids: torch.Tensor, staging: torch.Tensor) -> None:
    """Copies engine blocks `ids` of the paged layer into staging (the save side's one copy).

    staging[0] and staging[1] must be contiguous (index_select writes `out` in place).
    Runs in inference mode: vLLM allocates the paged cache, and staging first used during a
    forward is allocated, in inference mode, and an inference tensor may only be updated in
    place in inference mode, which is per thread (these run on the connector's threads).
    """
    with torch.inference_mode():
        _gather(layer, ids, staging)


def _gather(layer: PagedLayer, ids: torch.Tensor, staging: torch.Tensor) -> None:
    for half, dst in zip(halves(layer), staging):
        if half.device.type == "cpu":
            torch.index_select(half, 0, ids, out=dst)
        else:  # blocking: the commit reads dst as soon as the gathers are done
            dst.copy_(half.index_select(0, ids.to(half.device)))


class DeviceCopies(Protocol):
    """Where a device stream stands (torch.cuda.Event): synchronize() waits for what came before."""

    def synchronize(self) -> None: ...


def device_copies(layer: PagedLayer) -> Optional[DeviceCopies]:
    """After scatter: what to wait for before its staging is written again (None on the CPU,
    where scatter's copies are done when it returns)."""
    half = halves(layer)[0]
    if half.device.type != "cuda":
        return None
    event = torch.cuda.Event()  # type: ignore[no-untyped-call]
    event.record(torch.cuda.current_stream(half.device))
    return event


def wait_for_device_copies(layer: PagedLayer) -> None:
    """Before staging is reused: scatter's device copies from it are asynchronous."""
    if halves(layer)[0].device.type == "cuda":
        torch.cuda.current_stream(halves(layer)[0].device).synchronize()
