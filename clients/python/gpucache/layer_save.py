"""Saving the blocks an engine step completed: one gather per layer, commits in the background.

gather_layer(l) queues the copy of layer l of every block to save out of the paged cache into
staging (on a copy thread of its own, so save_kv_layer returns at once). After the last layer,
wait_gathered() is the only wait the engine sees: from then on the paged blocks may be
overwritten or freed. commit() then writes each block with the commit protocol straight from
the staging buffers (writev of the layer regions) on the save pool, and gives the staging back
when the last block is committed. A failed commit is dropped (EEXIST: someone else stored it).
The worker may hold back the blocks of some requests at commit (their KV attended to a block
whose load failed): those are never written.
"""

from __future__ import annotations

import errno
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, List, Optional, Sequence

from .block_io import commit_block, payload_buffers
from .block_names import BlockNamer
from .client import MountClient
from .connector_types import BlockOp, SaveSpec, WorkerStats
from .kv_layout import PagedLayer, engine_block_ids, gather
from .staging import StagingPool


class SaveBatch:
    def __init__(self, client: MountClient, namer: BlockNamer, specs: Sequence[SaveSpec], layers: int,
                 staging: StagingPool, copier: ThreadPoolExecutor, stats: WorkerStats):
        self.geometry = namer.geometry
        self._client = client
        self._namer = namer
        self._ops = [op for spec in specs for op in spec.blocks]
        self._owners = [spec for spec in specs for _ in spec.blocks]
        self._ids = engine_block_ids([i for op in self._ops for i in op.engine_block_ids])
        self._staging_pool = staging
        self._staging = staging.acquire(len(self._ops))
        self._copier = copier
        self._stats = stats
        self._gathers: List[Optional[Future[None]]] = [None] * layers
        self._left = len(self._ops)
        self._lock = threading.Lock()
        self.bytes = len(self._ops) * self.geometry.payload_bytes

    def gather_layer(self, layer: int, paged: PagedLayer) -> None:
        self._gathers[layer] = self._copier.submit(gather, paged, self._ids, self._staging.layers[layer])

    def wait_gathered(self) -> bool:
        """True when every layer is in staging (a layer never saved makes the batch unusable)."""
        wait([f for f in self._gathers if f is not None])
        return all(f is not None and f.exception() is None for f in self._gathers)

    def commit(self, pool: ThreadPoolExecutor, gate: threading.Event,
               withheld: Callable[[SaveSpec], bool] = lambda spec: False) -> List[Future[None]]:
        """Commits every block but those of the requests `withheld` names (counted, never written)."""
        specs = {id(spec): spec for spec in self._owners}  # each asked once
        held = {key for key, spec in specs.items() if withheld(spec)}
        keep = [(i, op) for i, op in enumerate(self._ops) if id(self._owners[i]) not in held]
        skipped = len(self._ops) - len(keep)
        if skipped:
            with self._lock:
                self._stats.skipped_commits["load-failed"] = self._stats.skipped_commits.get("load-failed", 0) + skipped
                self._left -= skipped
        if not keep:
            self.drop()
            return []
        return [pool.submit(self._commit_one, i, op, gate) for i, op in keep]

    def drop(self) -> None:
        self._staging_pool.release(self._staging)

    def _commit_one(self, i: int, op: BlockOp, gate: threading.Event) -> None:
        gate.wait()  # always set, except while a test holds commits in flight
        try:
            halves = [self.geometry.block_halves(layer, i) for layer in self._staging.layers]
            identity = self._namer.identity(op.chain, op.adapter)
            commit_block(self._client, identity, payload_buffers(self.geometry, halves))
            with self._lock:
                self._stats.committed_blocks += 1
        except OSError as e:
            name = errno.errorcode.get(e.errno or 0, "EIO")
            with self._lock:
                self._stats.skipped_commits[name] = self._stats.skipped_commits.get(name, 0) + 1
        finally:
            with self._lock:
                self._left -= 1
                last = self._left == 0
            if last:
                self.drop()
