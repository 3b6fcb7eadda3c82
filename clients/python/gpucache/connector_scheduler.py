"""The scheduler half of the connector core: what each request can load and must save.

Call order (vLLM V1's scheduler, docs/engine-integration.md):
  lookup()        get_num_new_matched_tokens: side-effect free, may be called again and again
  on_alloc()      update_state_after_alloc: blocks are allocated; a load is planned
  build_meta()    build_connector_meta, once per step: planned loads, and the blocks that
                  become complete this step and are not stored yet
  on_finished()   request_finished: never holds the engine's blocks (False), because a save
                  has copied its bytes out of the paged cache by the end of its step
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import Any, Deque, Dict, List, Optional, Set, Tuple

from .block_names import BlockNamer, identity_name
from .client import MountClient
from .connector_types import (RECENT_LOAD_STEPS, BlockOp, ConnectorConfig, LoadSpec, RequestView, SaveSpec,
                              StepInfo, StepMeta)
from .vllm_hash import none_hash, request_block_hashes

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Request:
    view: RequestView
    chains: List[List[bytes]]  # of every full gpucache block of the prompt
    adapter: str = ""  # the identity's adapter field: the LoRA name as an identity name
    block_ids: List[int] = dataclasses.field(default_factory=list)
    saved_upto: int = 0  # blocks [0, saved_upto) are stored or have been handed to a save
    # An asynchronous (cold) load was planned for it: later lookups report hot blocks only.
    # vLLM 0.32 frees a request whose async load failed from its first block and looks it up
    # again as a new one; claiming the same cold blocks again would repeat that forever. What
    # a refill did bring back is hot by then.
    cold_tried: bool = False


@dataclasses.dataclass(frozen=True)
class _Match:
    num_computed: int
    hot: int  # blocks [0, hot) are computed by the engine or present in the mount
    blocks: int  # blocks reported as loadable (hot ones plus cold candidates)
    is_async: bool


class SchedulerCore:
    def __init__(self, config: ConnectorConfig):
        self.config = config
        self.geometry = config.geometry
        self.namer = BlockNamer(config.model, config.geometry)
        self._root_hash = none_hash(config.seed())
        # OSError(ENOTCONN) now unless a gpucachefs is mounted at config.root (see WorkerCore).
        self._mount = MountClient(config.root, plain_directory=config.plain_directory)
        self._mount.require_mount()
        self._requests: Dict[str, _Request] = {}
        self._matches: Dict[str, _Match] = {}
        self._pending_loads: List[LoadSpec] = []
        # Engine blocks loaded synchronously, per step, the last RECENT_LOAD_STEPS steps
        # (StepMeta.attended).
        self._recent_sync_loads: Deque[Set[int]] = collections.deque(maxlen=RECENT_LOAD_STEPS)
        self.external_tokens = 0  # tokens the engine was told to load from the mount (stats)
        # Requests neither looked up nor saved, by reason (RequestView.uncacheable), counted
        # once per allocation (on_alloc); each reason is logged once.
        self.uncacheable: Dict[str, int] = {}

    # ---- get_num_new_matched_tokens ---------------------------------------------------

    def lookup(self, view: RequestView, num_computed_tokens: int) -> Tuple[int, bool]:
        """(tokens loadable beyond num_computed_tokens, whether they load asynchronously)."""
        if view.uncacheable is not None:
            if view.uncacheable not in self.uncacheable:
                self.uncacheable[view.uncacheable] = 0
                log.warning("gpucache: requests with %s are not cached (they match nothing and "
                            "save nothing): their KV depends on more than the token ids",
                            view.uncacheable)
            return 0, False
        req = self._request(view)
        # At least one prompt token is always left to compute: the engine needs its logits.
        usable = min(len(req.chains), (len(view.prompt_token_ids) - 1) // self.geometry.block_tokens)
        # Blocks the engine computed itself (its own prefix cache) need not be in the mount:
        # the probe starts at the first block it still needs.
        hot = self._probe(req, num_computed_tokens // self.geometry.block_tokens, usable)
        blocks, is_async = hot, False
        if self.config.cold_refill and hot < usable and not req.cold_tried:
            affordable = self.config.cold_budget_bytes // self.geometry.payload_bytes
            blocks, is_async = min(usable, hot + affordable), True
        tokens = blocks * self.geometry.block_tokens - num_computed_tokens
        if tokens <= 0:
            blocks, tokens, is_async = hot, 0, False
        self._matches[view.req_id] = _Match(num_computed_tokens, hot, blocks, is_async)
        return tokens, is_async

    def _request(self, view: RequestView) -> _Request:
        req = self._requests.get(view.req_id)
        if req is None:
            hashes = request_block_hashes(list(view.prompt_token_ids), self.geometry.engine_block_size,
                                          self.config.seed(), lora_name=view.lora_name,
                                          lora_path=view.lora_path, cache_salt=view.cache_salt)
            # Any LoRA name is usable: spaces or non-ASCII characters are escaped, not refused
            # here, inside the engine's scheduler (the chain hashes the name itself anyway).
            req = _Request(view, self.namer.chains(hashes, self._root_hash), identity_name(view.lora_name or ""))
            self._requests[view.req_id] = req
        return req

    def _probe(self, req: _Request, start: int, limit: int) -> int:
        """The end of the run of blocks present from `start` on (stat until the first miss;
        any error is a miss, and so is a file that is not on the gpucachefs mount)."""
        for j in range(start, limit):
            path = os.path.join(self.config.root, self.namer.identity(req.chains[j], req.adapter).relative_path())
            try:
                st = os.stat(path)
            except OSError:
                return j
            if not self._mount.on_mount(st.st_dev):
                return j
        return limit

    # ---- update_state_after_alloc -----------------------------------------------------

    def on_alloc(self, view: RequestView, block_ids: List[int], num_external_tokens: int) -> None:
        if view.uncacheable is not None:
            # Never registered: build_meta plans no load and no save for it.
            self.uncacheable[view.uncacheable] = self.uncacheable.get(view.uncacheable, 0) + 1
            return
        req = self._request(view)
        req.block_ids = list(block_ids)
        match = self._matches.pop(view.req_id, None)
        if num_external_tokens <= 0 or match is None:
            req.saved_upto = max(req.saved_upto, match.hot if match else 0)
            return
        self.external_tokens += num_external_tokens
        req.cold_tried = req.cold_tried or match.is_async
        bt = self.geometry.block_tokens
        first = match.num_computed // bt
        last = (match.num_computed + num_external_tokens) // bt
        spec = LoadSpec(view.req_id, [self._op(req, j) for j in range(first, last)],
                        skip_engine_blocks=(match.num_computed % bt) // self.geometry.engine_block_size,
                        is_async=match.is_async, hot_blocks=max(0, match.hot - first))
        self._pending_loads.append(spec)
        # Loaded blocks are stored already: not saved again (a failed one is re-saved after the
        # engine recomputes it: see _note_progress).
        req.saved_upto = max(req.saved_upto, last)

    def _op(self, req: _Request, j: int) -> BlockOp:
        per = self.geometry.engine_blocks_per_block
        return BlockOp(j, req.chains[j], req.adapter, req.block_ids[j * per:(j + 1) * per])

    # ---- build_connector_meta ---------------------------------------------------------

    def build_meta(self, step: StepInfo) -> StepMeta:
        meta = StepMeta(loads=self._pending_loads)
        self._pending_loads = []
        self._recent_sync_loads.append({i for spec in meta.loads if not spec.is_async
                                        for op in spec.blocks for i in op.engine_block_ids})
        recent = set().union(*self._recent_sync_loads)
        for req_id in step.preempted_req_ids:
            if req_id in self._requests:
                self._requests[req_id].block_ids = []  # freed; new ones come with the resume
        for s in step.scheduled:
            req = self._requests.get(s.req_id)
            if req is None:
                continue  # never looked up: nothing to save for it
            if s.new_block_ids is not None:
                req.block_ids = list(s.new_block_ids) if s.replace_block_ids else req.block_ids + list(s.new_block_ids)
            if recent:
                bs = self.geometry.engine_block_size
                context = -(-s.num_computed_tokens // bs)
                # Set operations in C: a long prompt's blocks, every request, every step.
                attended = recent.intersection(req.block_ids[:context])
                if attended:
                    meta.attended[s.req_id] = (s.num_computed_tokens, sorted(attended))
                end = -(-(s.num_computed_tokens + s.num_scheduled_tokens) // bs)
                meta.recomputed += recent.intersection(req.block_ids[context:end])
            saves = self._note_progress(req, s.num_computed_tokens, s.num_scheduled_tokens)
            if saves:
                meta.saves.append(SaveSpec(s.req_id, saves, s.num_computed_tokens))
        for req_id in step.finished_req_ids:
            self.on_finished(req_id)
        return meta

    def _note_progress(self, req: _Request, computed: int, scheduled: int) -> List[BlockOp]:
        """The blocks this step completes that are neither stored nor being saved."""
        bt = self.geometry.block_tokens
        # A rewind (a failed load, a preemption) recomputes blocks that may not be stored.
        req.saved_upto = min(req.saved_upto, computed // bt)
        done = min(computed + scheduled, len(req.view.prompt_token_ids))
        full = min(done // bt, len(req.chains))
        per = self.geometry.engine_blocks_per_block
        ops = [self._op(req, j) for j in range(req.saved_upto, full) if len(req.block_ids) >= (j + 1) * per]
        req.saved_upto = max(req.saved_upto, full)
        return ops

    # ---- request_finished -------------------------------------------------------------

    def on_finished(self, req_id: str) -> Tuple[bool, Optional[Dict[str, Any]]]:
        self._requests.pop(req_id, None)
        self._matches.pop(req_id, None)
        return False, None
