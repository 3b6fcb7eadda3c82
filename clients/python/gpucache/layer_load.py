"""Loading blocks layer by layer: parallel preadv into a ring of staging slots, one scatter per layer.

start() queues, for the first `depth` layers in order, a few read tasks (each a run of blocks)
on the I/O pool, so layer 0 is read first by every thread and is usable soonest. finish_layer(l)
waits for layer l's reads and copies the good blocks into the paged cache; then, its slot free
again, it queues the reads of layer l + depth into that slot, so the pool reads ahead `depth`
layers while the forward runs and a load holds depth layers of its blocks in staging, never all
of them (ConnectorConfig.load_staging_layers). On a GPU the scatter's copy out of the (pinned)
slot is asynchronous: the reads that refill the slot first wait for it on the host. Layers are
finished in order: finish_layer(l) first retires any earlier layer not finished yet (waits for
its reads, frees its slot without copying it: the forward did not wait for it).

Failure policy: any failure of block j of a request (missing, EIO, identity, size, short read)
truncates that request's hit at j: blocks from j on are not read any more, not scattered in the
layers still to come, and reported by error_block_ids() so the engine recomputes them (layers
scattered before the failure was seen are recomputed too). A layer never waited for
(finish_layer not called for it, as when vLLM replays a full CUDA graph) was never copied into
the paged cache: finish() then reports every block as failed. The layers past the ring of one
never waited for are never queued, so finish() waits only for reads that were. Staging that
cannot be allocated (torch raising RuntimeError or MemoryError) fails every block of the load
("staging"): the engine recomputes rather than crashes.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from .block_io import BlockSource, LoadFailure
from .client import MountClient
from .block_names import BlockNamer
from .connector_types import LoadSpec, WorkerStats
from .kv_layout import (DeviceCopies, PagedLayer, device_copies, engine_block_ids, scatter,
                        wait_for_device_copies)
from .staging import StagingPool, StagingSet


@dataclasses.dataclass
class _Item:
    spec: int  # index into specs
    pos: int  # the block's position in its spec
    row: int  # the block's position in the staging tensors
    source: BlockSource


class LayerwiseLoad:
    def __init__(self, client: MountClient, namer: BlockNamer, specs: Sequence[LoadSpec],
                 layers: Sequence[PagedLayer], pool: ThreadPoolExecutor, staging: StagingPool,
                 stats: WorkerStats, threads: int, depth: int = 4):
        self.geometry = namer.geometry
        self.specs = list(specs)
        self.layers = layers
        self._pool = pool
        self._staging_pool = staging
        self._stats = stats
        self._threads = max(1, threads)
        self._depth = max(1, min(depth, len(layers)))  # layer slots in the ring
        self._items: List[_Item] = []
        for s, spec in enumerate(self.specs):
            for pos, op in enumerate(spec.blocks):
                source = BlockSource(client, namer.identity(op.chain, op.adapter), self.geometry)
                self._items.append(_Item(s, pos, len(self._items), source))
        self._first_bad = [len(spec.blocks) for spec in self.specs]
        self._lock = threading.Lock()
        self._staging: Optional[StagingSet] = None
        if self._items and self.layers:
            try:
                self._staging = staging.acquire(len(self._items), self._depth)
            except (RuntimeError, MemoryError):  # torch's out of (pinned) memory: recompute
                self._fail_all("staging")
        self._runs: List[List[_Item]] = []
        self._futures: List[List[Future[None]]] = [[] for _ in layers]
        self._waited = [False] * len(layers)  # finish_layer(l) copied layer l when asked
        self._next = 0  # layers before it are retired: read, scattered or skipped, slot free
        self._closed = False

    def truncate(self, spec: int, pos: int, reason: str) -> None:
        """Marks block `pos` of spec `spec` and everything after it unusable."""
        with self._lock:
            if pos < self._first_bad[spec]:
                self._first_bad[spec] = pos
                self._stats.count_failure(reason)

    def _fail_all(self, reason: str) -> None:
        for s in range(len(self.specs)):
            self.truncate(s, 0, reason)

    def start(self) -> None:
        if self._staging is None:
            return
        size = -(-len(self._items) // self._threads)
        self._runs = [self._items[i:i + size] for i in range(0, len(self._items), size)]
        for layer in range(self._depth):
            self._queue(layer, None)

    def _queue(self, layer: int, after: Optional[DeviceCopies]) -> None:
        """Queues the reads of `layer` into its slot (free once `after`, the copies out, are done)."""
        for run in self._runs:
            self._futures[layer].append(self._pool.submit(self._read_run, layer, run, after))

    def _read_run(self, layer: int, run: List[_Item], after: Optional[DeviceCopies]) -> None:
        assert self._staging is not None
        if after is not None:
            try:
                after.synchronize()  # the previous layer's copy out of this slot
            except Exception:  # the slot may still be in use: read nothing into it
                self._fail_all("error")
                return
        buffers = self._staging.layers[layer % self._depth]
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
        if self._closed or layer < self._next:
            return
        if layer > self._next:  # the forward ran those layers without their KV: read no more
            self._fail_all("unwaited")
        for skipped in range(self._next, layer):
            self._retire(skipped, copy=False)
        self._retire(layer, copy=True)
        self._waited[layer] = True

    def _retire(self, layer: int, copy: bool) -> None:
        """Waits for layer `layer`'s reads, scatters them if `copy`, and hands the slot on."""
        self._next = layer + 1
        if self._staging is None:
            return
        wait(self._futures[layer])
        staging = self._staging.layers[layer % self._depth]
        src, dst = self._scatter_indices() if copy else ([], [])
        if dst:
            try:
                if len(src) != staging.shape[1]:
                    staging = staging.index_select(1, torch.as_tensor(src, dtype=torch.long))
                scatter(self.layers[layer], engine_block_ids(dst), staging)
            except Exception:  # not raised into the forward: every block fails, vLLM recomputes
                self._fail_all("error")
                dst = []
        if layer + self._depth < len(self.layers):
            self._queue(layer + self._depth, device_copies(self.layers[layer]) if dst else None)

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
        if self._items and not all(self._waited):
            # Whatever the forward read from those layers was not these blocks.
            self._fail_all("unwaited")
        for futures in self._futures:
            wait(futures)
        try:
            for item in self._items:
                item.source.close()
        finally:
            # Whatever closing did, the staging goes back (else the pool lends it for good).
            self._closed = True
            if self._staging is not None:
                if self.layers:
                    wait_for_device_copies(self.layers[0])
                self._staging_pool.release(self._staging)
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
