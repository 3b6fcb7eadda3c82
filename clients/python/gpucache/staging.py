"""Reusable staging tensors (pinned when torch has CUDA), one per layer slot.

Allocating and first-touching hundreds of MiB per engine step costs as much as reading them
(a page fault per 4 KiB), and pinned allocations are slower still, so loads and saves borrow a
set of per-layer tensors from this pool and give it back when their last byte has moved.

A save borrows one tensor per layer of the model (it holds every layer until committed); a
load only a ring of a few layer slots (layer_load.py). Between steps the pool keeps at most
`keep` sets and `keep_bytes` bytes of them, largest first: a one-off huge set is given back
rather than held (pinned, on GPU hosts) for good. An allocation that fails is retried once
after giving back every idle set; the second failure is raised (RuntimeError or MemoryError,
as torch raises them) for the caller to turn into a failed load or a dropped save.
"""

from __future__ import annotations

import threading
from typing import List, Optional

import torch

from .kv_layout import KVGeometry


def _nbytes(tensors: List[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class StagingSet:
    """Per slot, a [2, blocks * engine_blocks_per_block, block_size, heads, dim] view."""

    def __init__(self, tensors: List[torch.Tensor], blocks: int, geometry: KVGeometry,
                 slots: Optional[int] = None):
        self.tensors = tensors  # all of them: a set lent for fewer slots is kept whole
        self.capacity = tensors[0].shape[1] // geometry.engine_blocks_per_block
        self.nbytes = _nbytes(tensors)
        rows = blocks * geometry.engine_blocks_per_block
        # Slicing dim 1 keeps each half contiguous, which preadv and index_select(out=) need.
        self.layers = [t[:, :rows] for t in tensors[:len(tensors) if slots is None else slots]]


class StagingPool:
    def __init__(self, geometry: KVGeometry, pin: Optional[bool] = None, keep: int = 2,
                 keep_bytes: Optional[int] = None):
        self.geometry = geometry
        self.pin = torch.cuda.is_available() if pin is None else pin
        self._keep = keep
        self._keep_bytes = keep_bytes  # None: no limit
        self._free: List[StagingSet] = []
        self._lock = threading.Lock()
        self.lent_bytes = 0  # in sets lent out now
        self.peak_bytes = 0  # the most this pool ever held at once (lent plus idle)

    def idle_bytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._free)

    def acquire(self, blocks: int, slots: Optional[int] = None) -> StagingSet:
        """A set of `slots` tensors (default: one per layer) of at least `blocks` blocks."""
        want = self.geometry.layers if slots is None else slots
        with self._lock:
            fits = [s for s in self._free if s.capacity >= blocks and len(s.tensors) >= want]
            if fits:
                best = min(fits, key=lambda s: s.nbytes)
                self._free.remove(best)
                self._lend(best.nbytes)
                return StagingSet(best.tensors, blocks, self.geometry, want)
        try:
            tensors = self._allocate(blocks, want)
        except (RuntimeError, MemoryError):
            with self._lock:
                self._free.clear()  # idle sets are only a cache: give them back and try again
            tensors = self._allocate(blocks, want)
        staging = StagingSet(tensors, blocks, self.geometry)
        with self._lock:
            self._lend(staging.nbytes)
        return staging

    def _allocate(self, blocks: int, slots: int) -> List[torch.Tensor]:
        return [self.geometry.staging(blocks, self.pin) for _ in range(slots)]

    def _lend(self, nbytes: int) -> None:
        self.lent_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.lent_bytes + sum(s.nbytes for s in self._free))

    def release(self, staging: StagingSet) -> None:
        with self._lock:
            self.lent_bytes -= staging.nbytes
            self._free.append(StagingSet(staging.tensors, staging.capacity, self.geometry))
            self._free.sort(key=lambda s: -s.nbytes)  # the largest sets serve every smaller request
            kept: List[StagingSet] = []
            total = 0
            for s in self._free:
                if len(kept) < self._keep and (self._keep_bytes is None or total + s.nbytes <= self._keep_bytes):
                    kept.append(s)
                    total += s.nbytes
            self._free = kept
