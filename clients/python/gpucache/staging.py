"""Reusable staging tensors (pinned when torch has CUDA), one per layer.

Allocating and first-touching hundreds of MiB per engine step costs as much as reading them
(a page fault per 4 KiB), and pinned allocations are slower still, so loads and saves borrow a
set of per-layer tensors from this pool and give it back when their last byte has moved.
"""

from __future__ import annotations

import threading
from typing import List, Optional

import torch

from .kv_layout import KVGeometry


class StagingSet:
    """Per layer, a [2, blocks * engine_blocks_per_block, block_size, heads, dim] view."""

    def __init__(self, tensors: List[torch.Tensor], blocks: int, geometry: KVGeometry):
        self.tensors = tensors
        self.capacity = tensors[0].shape[1] // geometry.engine_blocks_per_block
        rows = blocks * geometry.engine_blocks_per_block
        # Slicing dim 1 keeps each half contiguous, which preadv and index_select(out=) need.
        self.layers = [t[:, :rows] for t in tensors]


class StagingPool:
    def __init__(self, geometry: KVGeometry, pin: Optional[bool] = None, keep: int = 2):
        self.geometry = geometry
        self.pin = torch.cuda.is_available() if pin is None else pin
        self._keep = keep
        self._free: List[StagingSet] = []
        self._lock = threading.Lock()

    def acquire(self, blocks: int) -> StagingSet:
        with self._lock:
            fits = [s for s in self._free if s.capacity >= blocks]
            if fits:
                best = min(fits, key=lambda s: s.capacity)
                self._free.remove(best)
                return StagingSet(best.tensors, blocks, self.geometry)
        tensors = [self.geometry.staging(blocks, self.pin) for _ in range(self.geometry.layers)]
        return StagingSet(tensors, blocks, self.geometry)

    def release(self, staging: StagingSet) -> None:
        with self._lock:
            self._free.append(staging)
            self._free.sort(key=lambda s: -s.capacity)
            del self._free[self._keep:]  # the largest sets serve every smaller request
