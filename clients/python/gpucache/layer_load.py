"""Loading blocks layer by layer: parallel preadv into staging, one scatter per layer.

start() queues, for every layer in order, a few read tasks (each a run of blocks) on the I/O
pool, so layer 0 is read first by every thread and is usable soonest. finish_layer(l) waits
for layer l's reads and copies the good blocks into the paged cache; the pool meanwhile reads
the next layers. Failure policy: any failure of block j of a request (missing, EIO, identity,
size, short read) truncates that request's hit at j: blocks from j on are not read any more,
not scattered in the layers still to come, and reported by error_block_ids() so the engine
recomputes them (layers scattered before the failure was seen are recomputed too). A layer
never waited for (finish_layer not called, as when vLLM replays a full CUDA graph) was never
copied into the paged cache: finish() then reports every block as failed.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Dict, List, Sequence, Set, Tuple

import torch

from .block_io import BlockSource, LoadFailure
from .block_names import BlockNamer
from .connector_types import LoadSpec, WorkerStats
from .kv_layout import PagedLayer, engine_block_ids, scatter, wait_for_device_copies
from .staging import StagingPool


@dataclasses.dataclass
class _Item:
    spec: int  # index into specs
    pos: int  # the block's position in its spec
    row: int  # the block's position in the staging tensors
    source: BlockSource


class LayerwiseLoad:
    def __init__(self, root: str, namer: BlockNamer, specs: Sequence[LoadSpec],
                 layers: Sequence[PagedLayer], pool: ThreadPoolExecutor, staging: StagingPool,
                 stats: WorkerStats, threads: int):
        self.geometry = namer.geometry
        self.specs = list(specs)
        self.layers = layers
        self._pool = pool
        self._staging_pool = staging
        self._stats = stats
        self._threads = max(1, threads)
        self._items: List[_Item] = []
        for s, spec in enumerate(self.specs):
            for pos, op in enumerate(spec.blocks):
                source = BlockSource(root, namer.identity(op.chain, op.adapter), self.geometry)
                self._items.append(_Item(s, pos, len(self._items), source))
        self._first_bad = [len(spec.blocks) for spec in self.specs]
        self._lock = threading.Lock()
        self._staging = staging.acquire(len(self._items))
        self._futures: List[List[Future[None]]] = [[] for _ in layers]
        self._scattered = [False] * len(layers)
        self._closed = False

    def truncate(self, spec: int, pos: int, reason: str) -> None:
        """Marks block `pos` of spec `spec` and everything after it unusable."""
        with self._lock:
            if pos < self._first_bad[spec]:
                self._first_bad[spec] = pos
                self._stats.count_failure(reason)

    def start(self) -> None:
        if not self._items:
            return
        size = -(-len(self._items) // self._threads)
        runs = [self._items[i:i + size] for i in range(0, len(self._items), size)]
        for layer in range(len(self.layers)):
            for run in runs:
                self._futures[layer].append(self._pool.submit(self._read_run, layer, run))

    def _read_run(self, layer: int, run: List[_Item]) -> None:
        buffers = self._staging.layers[layer]
        for item in run:
            if item.pos >= self._first_bad[item.spec]:
                continue  # the hit already ends before this block
            try:
                item.source.read_layer(layer, self.geometry.block_halves(buffers, item.row))
            except LoadFailure as e:
                self.truncate(item.spec, item.pos, e.reason)
            except Exception:  # a bug must not pass for a good block
                self.truncate(item.spec, item.pos, "error")
                raise

    def finish_layer(self, layer: int) -> None:
        """Returns when layer `layer` of every good block is in the paged cache."""
        if self._scattered[layer] or self._closed:
            return
        wait(self._futures[layer])
        src, dst = self._scatter_indices()
        if dst:
            staging = self._staging.layers[layer]
            if len(src) != staging.shape[1]:
                staging = staging.index_select(1, torch.as_tensor(src, dtype=torch.long))
            scatter(self.layers[layer], engine_block_ids(dst), staging)
        self._scattered[layer] = True

    def _scatter_indices(self) -> Tuple[List[int], List[int]]:
        """Staging rows and the engine blocks they go to, for the blocks still good."""
        per = self.geometry.engine_blocks_per_block
        src: List[int] = []
        dst: List[int] = []
        for item in self._items:
            if item.pos >= self._first_bad[item.spec]:
                continue
            spec = self.specs[item.spec]
            skip = spec.skip_engine_blocks if item.pos == 0 else 0
            ids = spec.blocks[item.pos].engine_block_ids
            src.extend(range(item.row * per + skip, (item.row + 1) * per))
            dst.extend(ids[skip:])
        return src, dst

    def finish(self) -> Dict[str, Set[int]]:
        """Waits for every read, frees the files and staging; per request, the failed blocks."""
        if self._closed:
            return {}
        if self._items and not all(self._scattered):
            # Whatever the forward read from those layers was not these blocks.
            for s in range(len(self.specs)):
                self.truncate(s, 0, "unwaited")
        for futures in self._futures:
            wait(futures)
        for item in self._items:
            item.source.close()
        if self.layers:
            wait_for_device_copies(self.layers[0])
        self._staging_pool.release(self._staging)
        self._closed = True
        return self.error_block_ids()

    def failed_tokens(self) -> Dict[str, int]:
        """Per request whose load failed, the first token whose KV the load did not provide."""
        out: Dict[str, int] = {}
        for s, spec in enumerate(self.specs):
            bad = self._first_bad[s]
            if bad < len(spec.blocks):
                skip = spec.skip_engine_blocks if bad == 0 else 0
                out[spec.req_id] = (spec.blocks[bad].index * self.geometry.block_tokens
                                    + skip * self.geometry.engine_block_size)
        return out

    def error_block_ids(self) -> Dict[str, Set[int]]:
        out: Dict[str, Set[int]] = {}
        for s, spec in enumerate(self.specs):
            bad = spec.blocks[self._first_bad[s]:]
            self._stats.loaded_blocks += self._first_bad[s]
            if bad:
                skip = spec.skip_engine_blocks if self._first_bad[s] == 0 else 0
                ids = {i for op in bad for i in op.engine_block_ids}
                ids -= set(bad[0].engine_block_ids[:skip])
                out[spec.req_id] = ids
        return out
