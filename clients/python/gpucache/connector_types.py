"""What the engine-neutral connector core is configured with and passes between its halves.

The scheduler half decides, per engine step, which gpucache blocks each request loads and
saves; the worker half (one per TP/PP rank) moves the bytes. What goes from one to the other
is a StepMeta: plain data, picklable, as vLLM ships connector metadata to its workers. A block
travels as its chain (and adapter), not as a path: each worker names the block for its own
shard (tp_rank is part of the identity).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from .block_names import ModelIdentity
from .kv_layout import KVGeometry


@dataclasses.dataclass
class ConnectorConfig:
    root: str  # the gpucachefs mountpoint (a plain directory only with plain_directory)
    model: ModelIdentity
    geometry: KVGeometry
    hash_seed: Optional[str] = None  # vLLM's PYTHONHASHSEED; None reads the environment
    io_threads: int = 4  # parallel preadv calls while loading
    save_threads: int = 4  # background commits (through FUSE each waits on the daemon)
    max_inflight_save_bytes: int = 2 << 30  # wait_for_save waits for older commits above this
    cold_refill: bool = False  # ask .gpucache/ctl for a missed prefix (asynchronous load)
    cold_budget_bytes: int = 256 << 20  # at most this much refilled per request
    cold_deadline_s: float = 2.0  # a refill not done by then is a miss
    pin_staging: Optional[bool] = None  # None: pinned when torch has CUDA
    # A load stages this many layers of its blocks at once (a ring of slots; at least 1): the
    # pool reads that many layers ahead of the forward.
    load_staging_layers: int = 4
    staging_keep_bytes: int = 1 << 30  # idle staging kept for the next steps; the rest is freed
    # Use `root` as a plain directory, not a gpucachefs mount: for tests and the benchmarks'
    # `direct` side only (no checksums, eviction, quota or tenancy). Off, the cores refuse a
    # root where no gpucachefs is mounted (OSError ENOTCONN) and ignore files not on it.
    plain_directory: bool = False

    def seed(self) -> str:
        seed = self.hash_seed if self.hash_seed is not None else os.environ.get("PYTHONHASHSEED")
        if seed is None:
            # vLLM would hash from a random root: no other engine could ever share the blocks.
            raise ValueError("set PYTHONHASHSEED (as for vLLM) or ConnectorConfig.hash_seed")
        return seed


@dataclasses.dataclass
class RequestView:
    """What the core needs of a request (vLLM's Request has all of it)."""

    req_id: str
    prompt_token_ids: Sequence[int]
    lora_name: Optional[str] = None
    cache_salt: Optional[str] = None
    # Why the request's KV is not a function of what the identity covers (token ids, adapter,
    # salt), e.g. "multimodal inputs" or "prompt embeddings": such a request matches nothing
    # and saves nothing (None: cacheable).
    uncacheable: Optional[str] = None
    # The LoRA adapter's path (vLLM's LoRARequest.lora_path): hashed with its name, as vLLM
    # does, so a name re-pointed at other weights names other blocks.
    lora_path: Optional[str] = None


@dataclasses.dataclass
class BlockOp:
    """One gpucache block of a request and the engine blocks it maps to."""

    index: int  # j: the block covers tokens [j * block_tokens, (j + 1) * block_tokens)
    chain: List[bytes]
    adapter: str
    engine_block_ids: List[int]


@dataclasses.dataclass
class LoadSpec:
    req_id: str
    blocks: List[BlockOp]
    skip_engine_blocks: int = 0  # of blocks[0]: already computed by the engine, not written
    is_async: bool = False
    hot_blocks: int = 0  # leading blocks found in the mount; the rest is asked of the cold tier


@dataclasses.dataclass
class SaveSpec:
    req_id: str
    blocks: List[BlockOp]
    # The request's computed tokens before this step: the step's KV is computed from here on,
    # attending to what the cache holds before it (the worker drops the saves of a step that
    # attended to a block whose load failed).
    computed_from: int = 0


# Steps during which an engine block loaded synchronously is followed: its load's failure is
# known at the end of its own step, and requests scheduled before vLLM heard of it (the next
# step with asynchronous scheduling, more with pipeline parallelism) may attend to it too.
RECENT_LOAD_STEPS = 4


@dataclasses.dataclass
class StepMeta:
    loads: List[LoadSpec] = dataclasses.field(default_factory=list)
    saves: List[SaveSpec] = dataclasses.field(default_factory=list)
    # Per request of the step, saving or not: its num_computed_tokens, and the engine blocks
    # loaded synchronously in the last RECENT_LOAD_STEPS steps among those its step attends to
    # (tokens [0, num_computed_tokens)). vLLM's prefix cache shares such a block with other
    # requests at once, so a failed load is garbage in their KV too, whichever request loaded it.
    attended: Dict[str, Tuple[int, List[int]]] = dataclasses.field(default_factory=dict)
    # Of those engine blocks, the ones this step computes again from their first token (a
    # rewound request). The step writes them before any request attends to them (vLLM writes a
    # layer's KV into the paged cache, then attends), so they are good from this step on.
    recomputed: List[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ScheduledRequest:
    """One request in an engine step, as vLLM's SchedulerOutput describes it."""

    req_id: str
    num_computed_tokens: int  # before this step
    num_scheduled_tokens: int
    new_block_ids: Optional[List[int]] = None  # blocks added this step (all blocks if replace)
    replace_block_ids: bool = False  # a new or resumed (after preemption) request


@dataclasses.dataclass
class StepInfo:
    scheduled: List[ScheduledRequest]
    finished_req_ids: Sequence[str] = ()
    preempted_req_ids: Sequence[str] = ()


@dataclasses.dataclass
class WorkerStats:
    loaded_blocks: int = 0
    failed_blocks: Dict[str, int] = dataclasses.field(default_factory=dict)  # reason -> count
    committed_blocks: int = 0
    skipped_commits: Dict[str, int] = dataclasses.field(default_factory=dict)  # errno -> count

    def count_failure(self, reason: str) -> None:
        self.failed_blocks[reason] = self.failed_blocks.get(reason, 0) + 1
