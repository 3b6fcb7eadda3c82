"""The worker half of the connector core: moves bytes between the mount and the paged cache.

Call order per engine step (vLLM V1's model runner, docs/engine-integration.md):
  bind(meta); start_load(); for each layer: wait_for_layer(l) ... save_layer(l, kv);
  wait_for_save(); get_finished(finished ids); take_load_errors(); clear()
Synchronous loads are layer-wise within the step. Asynchronous ones (a prefix asked of the
cold tier) run on a thread of their own across steps and are reported by get_finished() as
received; their failed blocks come with take_load_errors() in that same step.

A load that failed leaves its blocks' slots in the paged cache holding something else, and the
engine computes the rest of the step's tokens attending to them before it hears of the
failure (and, with asynchronous scheduling, the next step's too). Their KV is wrong, and
stored it would be served to every engine: the saves of a request are withheld from its first
failed load until a step computes again from at or before the failed token (vLLM's rewind).
The same goes for any request that attended to a block whose load failed (vLLM's prefix cache
shares it at once): StepMeta.attended says which, _note_attended keeps track.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Deque, Dict, List, Optional, Sequence, Set, Tuple

from .block_names import BlockNamer, ModelIdentity
from .client import MountClient
from .cold_refill import RefillRun
from .connector_types import RECENT_LOAD_STEPS, ConnectorConfig, LoadSpec, SaveSpec, StepMeta, WorkerStats
from .kv_layout import PagedLayer, check_paged_layers
from .layer_load import LayerwiseLoad
from .layer_save import SaveBatch
from .staging import StagingPool


class WorkerCore:
    def __init__(self, config: ConnectorConfig, model: Optional[ModelIdentity] = None):
        """`model` overrides config.model for this rank (its tp_rank / pp_rank)."""
        self.config = config
        self.namer = BlockNamer(model or config.model, config.geometry)
        # Refused here, at start-up, if no gpucachefs is mounted at config.root (OSError
        # ENOTCONN; config.plain_directory opts out): a plain directory would take commits on
        # the local disk, unchecked, and serve them (or planted files) back.
        self.client = MountClient(config.root, plain_directory=config.plain_directory)
        self.client.require_mount()
        self.stats = WorkerStats()
        self.layers: List[PagedLayer] = []
        self.staging = StagingPool(config.geometry, config.pin_staging, keep_bytes=config.staging_keep_bytes)
        self._io = ThreadPoolExecutor(config.io_threads, thread_name_prefix="gpucache-read")
        self._copier = ThreadPoolExecutor(1, thread_name_prefix="gpucache-gather")
        self._savers = ThreadPoolExecutor(config.save_threads, thread_name_prefix="gpucache-commit")
        self._async = ThreadPoolExecutor(2, thread_name_prefix="gpucache-async-load")
        self.commit_gate = threading.Event()  # tests clear it to hold commits in flight
        self.commit_gate.set()
        self._meta: Optional[StepMeta] = None
        self._load: Optional[LayerwiseLoad] = None
        self._save: Optional[SaveBatch] = None
        self._save_dropped = False  # this step's saves had no staging: not saved at all
        self._commits: List[Tuple[Future[None], int]] = []  # in flight, with their bytes
        self._lock = threading.Lock()
        self._async_done: Dict[str, Set[int]] = {}  # req id -> its failed engine blocks
        self._errors: Set[int] = set()
        # req id -> the first token its failed load did not provide: saves computed past it
        # attended to garbage (written under _lock by the async loads too)
        self._failed_from: Dict[str, int] = {}
        # Engine blocks a synchronous load failed to fill and no step has computed again since,
        # per step, the last RECENT_LOAD_STEPS steps (this one last). A request whose step
        # attended to one (StepMeta.attended: the engine's prefix cache shares them at once)
        # computed that step's tokens over garbage, whichever request loaded the block: its
        # saves are withheld that step, and after it until a step computes again from where
        # that one did (vLLM's rewind).
        self._failed_recent: Deque[Set[int]] = collections.deque(maxlen=RECENT_LOAD_STEPS)
        self._garbage_now: Set[str] = set()  # requests that attended to one this step

    def register(self, layers: Sequence[PagedLayer], names: Optional[Sequence[str]] = None) -> None:
        """The paged cache, one entry per layer in forward order (`names` for the errors).

        ValueError unless there is one layer per layer of the geometry, each of its block size,
        KV heads and head size (kv_layout.check_paged_layers): refused here, at start-up,
        rather than failing or misplacing bytes in the forward pass."""
        check_paged_layers(self.config.geometry, layers, names)
        self.layers = list(layers)

    # ---- loading ----------------------------------------------------------------------

    def bind(self, meta: StepMeta) -> None:
        self._meta = meta
        self._save_dropped = False
        self._failed_recent.append(set())
        self._garbage_now = set()

    def start_load(self) -> None:
        meta = self._meta or StepMeta()
        sync = [spec for spec in meta.loads if not spec.is_async]
        for spec in meta.loads:
            if spec.is_async:
                # The deadline runs from now, not from when a pool thread gets to the request.
                self._async.submit(self._load_async, spec, time.monotonic() + self.config.cold_deadline_s)
        if sync:
            self._load = self._new_load(sync)
            self._load.start()

    def _new_load(self, specs: List[LoadSpec]) -> LayerwiseLoad:
        return LayerwiseLoad(self.client, self.namer, specs, self.layers, self._io,
                             self.staging, self.stats, self.config.io_threads,
                             self.config.load_staging_layers)

    def wait_for_layer(self, layer: int) -> None:
        if self._load is not None:
            self._load.finish_layer(layer)

    def _load_async(self, spec: LoadSpec, deadline: float) -> None:
        # Whatever happens, the request is reported done, or the engine would wait forever.
        failed = {i for op in spec.blocks for i in op.engine_block_ids}
        try:
            failed = self._refill_and_load(spec, deadline)
        finally:
            with self._lock:
                self._async_done[spec.req_id] = failed

    def _refill_and_load(self, spec: LoadSpec, deadline: float) -> Set[int]:
        """Refills the cold part of the prefix (bounded by budget and deadline), then loads."""
        good = len(spec.blocks)
        if spec.hot_blocks < len(spec.blocks):
            cold = spec.blocks[spec.hot_blocks:]
            run = RefillRun(self.client, [self.namer.identity(op.chain, op.adapter) for op in cold],
                            self.config.geometry.payload_bytes, self.config.cold_budget_bytes)
            good = spec.hot_blocks + run.wait(deadline)
        load = self._new_load([spec])
        if good < len(spec.blocks):
            load.truncate(0, good, "refill")
        load.start()
        for layer in range(len(self.layers)):
            load.finish_layer(layer)
        failed = load.finish().get(spec.req_id, set())
        self._note_failed(load)
        return failed

    def _note_failed(self, load: LayerwiseLoad) -> None:
        with self._lock:
            for req_id, token in load.failed_tokens().items():
                self._failed_from[req_id] = min(token, self._failed_from.get(req_id, token))

    def _finish_sync_load(self) -> None:
        """Waits for this step's synchronous load; its failed blocks become load errors."""
        if self._load is None:
            return
        for failed in self._load.finish().values():
            self._errors |= failed
            if self._failed_recent:
                self._failed_recent[-1] |= failed
        self._note_failed(self._load)
        self._load = None

    # ---- saving -----------------------------------------------------------------------

    def save_layer(self, layer: int, paged: Optional[PagedLayer] = None) -> None:
        """Queues the copy of layer `layer` of this step's completed blocks; never waits."""
        meta = self._meta
        if meta is None or not meta.saves or self._save_dropped:
            return
        if self._save is None:
            try:
                self._save = SaveBatch(self.client, self.namer, meta.saves, len(self.layers),
                                       self.staging, self._copier, self.stats)
            except (RuntimeError, MemoryError):  # torch's out of (pinned) memory
                # The cache is only an optimisation: the step goes on, its blocks unsaved.
                self._save_dropped = True
                blocks = sum(len(spec.blocks) for spec in meta.saves)
                self.stats.skipped_commits["staging"] = self.stats.skipped_commits.get("staging", 0) + blocks
                return
        self._save.gather_layer(layer, self.layers[layer] if paged is None else paged)

    def wait_for_save(self) -> None:
        """Returns once this step's blocks are out of the paged cache; commits go on."""
        batch, self._save = self._save, None
        self._save_dropped = False
        self._finish_sync_load()  # its failures decide which saves are withheld
        self._note_attended()
        if batch is None:
            return
        if not batch.wait_gathered():
            batch.drop()  # a layer was never saved: committing would store garbage
            self.stats.skipped_commits["incomplete"] = self.stats.skipped_commits.get("incomplete", 0) + 1
            return
        futures = batch.commit(self._savers, self.commit_gate, self._attended_failed_load)
        share = batch.bytes // max(1, len(futures))
        self._commits.extend((f, share) for f in futures)
        self._bound_inflight()

    def _attended_failed_load(self, spec: SaveSpec) -> bool:
        """True if the step computed `spec`'s blocks past a failed load of its request, or past
        an engine block another request's load failed to fill (_note_attended). A step that
        computes from at or before the failed token recomputes it: from then on the request's
        saves are good again."""
        with self._lock:
            if spec.req_id in self._garbage_now:
                return True
            failed_from = self._failed_from.get(spec.req_id)
            if failed_from is None:
                return False
            if spec.computed_from <= failed_from:
                del self._failed_from[spec.req_id]
                return False
            return True

    def _note_attended(self) -> None:
        """Requests of this step that attended to an engine block whose synchronous load failed
        lately and that no step has computed again (this one included): their KV from this
        step's first token on is garbage until a step computes again from there."""
        meta = self._meta
        if meta is None or not any(self._failed_recent):
            return
        for blocks in self._failed_recent:
            blocks.difference_update(meta.recomputed)
        failed = set().union(*self._failed_recent)
        with self._lock:
            for req_id, (computed_from, attended) in meta.attended.items():
                if not failed.isdisjoint(attended):
                    self._garbage_now.add(req_id)
                    self._failed_from[req_id] = min(computed_from, self._failed_from.get(req_id, computed_from))

    def _bound_inflight(self) -> None:
        self._commits = [(f, n) for f, n in self._commits if not f.done()]
        while self._commits and sum(n for _, n in self._commits) > self.config.max_inflight_save_bytes:
            wait([self._commits.pop(0)[0]])

    def drain(self) -> None:
        """Waits for every commit in flight (tests, benchmarks, shutdown)."""
        wait([f for f, _ in self._commits])
        self._commits = []

    # ---- end of step ------------------------------------------------------------------

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """(requests done sending: none, saves never hold blocks; requests done receiving)."""
        self._finish_sync_load()
        self._note_attended()
        with self._lock:
            done, self._async_done = self._async_done, {}
            for req_id in finished_req_ids:
                self._failed_from.pop(req_id, None)
        for failed in done.values():
            self._errors |= failed
        return None, (set(done) or None)

    def take_load_errors(self) -> Set[int]:
        errors, self._errors = self._errors, set()
        return errors

    def clear(self) -> None:
        self._meta = None

    def close(self) -> None:
        self.drain()
        for pool in (self._async, self._io, self._copier, self._savers):
            pool.shutdown(wait=True)
