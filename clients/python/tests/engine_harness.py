"""A miniature vLLM V1 engine that drives the connector core in vLLM's call order.

Scheduler side, per step: running requests first, then waiting ones; a waiting request is
looked up (get_num_new_matched_tokens) when it has no computed tokens, gets blocks, and
update_state_after_alloc; an asynchronous load parks it until get_finished reports it (one
that failed from its first block frees the blocks and is looked up again, as vLLM 0.32 does);
then build_connector_meta. Worker side: bind, start_load_kv, per request a forward in which layer l
waits (wait_for_layer_load) before using its past, save_kv_layer for every layer,
wait_for_save, get_finished, get_block_ids_with_load_errors, clear. Failed blocks rewind the
request to the first failed block and the step's output for it is dropped, as vLLM's
kv_load_failure_policy "recompute" does. Finished requests free their blocks at once
(request_finished returned False) and preemption frees them and starts the request over.

The paged cache is vLLM's: per layer [2, num_blocks, block_size, kv_heads, head_dim] or the
(K, V) pair. Models write their KV through a slot mapping, as reshape_and_cache does.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable, Dict, List, Optional, Set

import torch

from gpucache.connector_scheduler import SchedulerCore
from gpucache.connector_types import RequestView, ScheduledRequest, StepInfo
from gpucache.connector_worker import WorkerCore
from gpucache.kv_layout import KVGeometry


class PagedCache:
    def __init__(self, geometry: KVGeometry, num_blocks: int, kv_tuple: bool = False):
        g = geometry
        self.geometry = g
        self.block_size = g.engine_block_size
        shape = (num_blocks, g.engine_block_size, g.kv_heads, g.head_dim)
        if kv_tuple:
            self.layers = [(torch.zeros(shape, dtype=g.dtype), torch.zeros(shape, dtype=g.dtype))
                           for _ in range(g.layers)]
        else:
            self.layers = [torch.zeros((2,) + shape, dtype=g.dtype) for _ in range(g.layers)]
        self._free = collections.deque(range(num_blocks))

    def allocate(self, n: int) -> List[int]:
        if n > len(self._free):
            raise RuntimeError("out of KV blocks")
        return [self._free.popleft() for _ in range(n)]

    def free(self, ids: List[int]) -> None:
        self._free.extend(ids)

    def _slots(self, block_ids: List[int], start: int, end: int) -> torch.Tensor:
        pos = torch.arange(start, end)
        ids = torch.as_tensor(block_ids, dtype=torch.long)
        return ids[pos // self.block_size] * self.block_size + pos % self.block_size

    def write(self, layer: int, block_ids: List[int], start: int, k: torch.Tensor, v: torch.Tensor):
        """k, v: [tokens, heads, dim] for positions [start, start + tokens)."""
        slots = self._slots(block_ids, start, start + k.shape[0])
        for half, x in zip(self.layers[layer], (k, v)):
            half.view(-1, *half.shape[2:]).index_copy_(0, slots, x.to(half.dtype))

    def read(self, layer: int, block_ids: List[int], tokens: int):
        """(k, v), each [tokens, heads, dim], of positions [0, tokens)."""
        slots = self._slots(block_ids, 0, tokens)
        return tuple(half.view(-1, *half.shape[2:]).index_select(0, slots) for half in self.layers[layer])


@dataclasses.dataclass
class Request:
    req_id: str
    prompt: List[int]
    max_new_tokens: int = 1
    lora_name: Optional[str] = None
    cache_salt: Optional[str] = None
    lora_path: Optional[str] = None
    num_computed: int = 0
    block_ids: List[int] = dataclasses.field(default_factory=list)
    status: str = "waiting"  # waiting, waiting_for_remote_kvs, running, finished
    output: List[int] = dataclasses.field(default_factory=list)
    first_logits: Optional[torch.Tensor] = None
    num_external: int = 0
    loaded_tokens: int = 0  # tokens the connector delivered at the last admission, after failures
    rewinds: int = 0

    @property
    def tokens(self) -> List[int]:
        return self.prompt + self.output

    def view(self) -> RequestView:
        return RequestView(self.req_id, self.prompt, self.lora_name, self.cache_salt,
                           lora_path=self.lora_path)


WaitLayer = Callable[[int], None]


class EngineHarness:
    def __init__(self, scheduler: Optional[SchedulerCore], worker: Optional[WorkerCore],
                 cache: PagedCache, model, chunk: int):
        self.scheduler = scheduler
        self.worker = worker
        self.cache = cache
        self.model = model
        self.chunk = chunk
        self.waiting: List[Request] = []
        self.running: List[Request] = []
        self.done: Dict[str, Request] = {}
        self._finished_ids: Set[str] = set()
        self._preempted_ids: Set[str] = set()
        self._received: Set[str] = set()
        self.finish_replies: Dict[str, tuple] = {}
        self.steps = 0
        self.rewound: List[tuple] = []  # (step, req_id): a load failed, the request recomputes
        if worker is not None:
            worker.register(cache.layers)

    # ---- requests ---------------------------------------------------------------------

    def add(self, req: Request) -> Request:
        self.waiting.append(req)
        return req

    def preempt(self, req_id: str) -> None:
        req = next(r for r in self.running if r.req_id == req_id)
        self.running.remove(req)
        self.cache.free(req.block_ids)
        # As vLLM does: the output so far is kept and recomputed with the prompt.
        req.block_ids, req.num_computed, req.status = [], 0, "waiting"
        self.waiting.insert(0, req)
        self._preempted_ids.add(req_id)

    def run(self, max_steps: int = 1000) -> None:
        for _ in range(max_steps):
            if not self.waiting and not self.running:
                return
            self.step()
        raise RuntimeError("requests did not finish")

    # ---- one engine step --------------------------------------------------------------

    def step(self) -> None:
        self.steps += 1
        self.model.step = self.steps
        scheduled = self._schedule_running() + self._schedule_waiting()
        if not scheduled:
            time.sleep(0.005)  # only asynchronous loads in flight: an idle engine step
        meta = None
        if self.scheduler is not None:
            meta = self.scheduler.build_meta(StepInfo(
                [s for _, s in scheduled], sorted(self._finished_ids), sorted(self._preempted_ids)))
        finished_ids, self._finished_ids, self._preempted_ids = self._finished_ids, set(), set()
        results = self._execute(meta, scheduled, finished_ids)
        self._update(scheduled, results)

    def _blocks_for(self, req: Request, tokens: int) -> List[int]:
        need = -(-tokens // self.cache.block_size) - len(req.block_ids)
        new = self.cache.allocate(need) if need > 0 else []
        req.block_ids += new
        return new

    def _next_chunk(self, req: Request) -> int:
        if req.num_computed < len(req.prompt):
            end = min(len(req.prompt), (req.num_computed // self.chunk + 1) * self.chunk)
            return end - req.num_computed
        return 1  # decode: the last output token

    def _schedule_running(self):
        out = []
        for req in self.running:
            n = self._next_chunk(req)
            new = self._blocks_for(req, req.num_computed + n)
            out.append((req, ScheduledRequest(req.req_id, req.num_computed, n, new, False)))
        return out

    def _schedule_waiting(self):
        out = []
        for req in list(self.waiting):
            look_up = req.num_computed == 0 and self.scheduler is not None
            if req.status == "waiting_for_remote_kvs":
                if req.req_id not in self._received:
                    continue
                self._received.discard(req.req_id)
                req.status = "waiting"
                if req.num_computed:
                    self.scheduler.on_alloc(req.view(), req.block_ids, 0)  # vLLM's second call
                    look_up = False
                else:
                    # vLLM 0.32 (_update_waiting_for_remote_kv): a load that failed from its
                    # first block leaves no computed token; the blocks are freed and the request
                    # is looked up again (get_num_new_matched_tokens) as a new one.
                    self.cache.free(req.block_ids)
                    req.block_ids = []
            if look_up:
                ext, is_async = self.scheduler.lookup(req.view(), 0)
                self._blocks_for(req, ext if is_async else ext + 1)
                self.scheduler.on_alloc(req.view(), req.block_ids, ext)
                if is_async:
                    req.status, req.num_external = "waiting_for_remote_kvs", ext
                    continue
                req.num_computed = req.loaded_tokens = ext
            self.waiting.remove(req)
            n = self._next_chunk(req)
            self._blocks_for(req, req.num_computed + n)
            out.append((req, ScheduledRequest(req.req_id, req.num_computed, n, list(req.block_ids), True)))
            req.status = "running"
            self.running.append(req)
        return out

    def _execute(self, meta, scheduled, finished_ids):
        w = self.worker
        wait_layer: WaitLayer = (lambda layer: None) if w is None else w.wait_for_layer
        if w is not None:
            w.bind(meta)
            w.start_load()
        logits = {}
        for req, s in scheduled:
            logits[req.req_id] = self.model.forward(req, s.num_computed_tokens,
                                                    s.num_computed_tokens + s.num_scheduled_tokens,
                                                    self.cache, wait_layer)
        errors: Set[int] = set()
        received: Set[str] = set()
        if w is not None:
            for layer, paged in enumerate(self.cache.layers):
                w.save_layer(layer, paged)
            w.wait_for_save()
            _, recv = w.get_finished(finished_ids)
            received = recv or set()
            errors = w.take_load_errors()
            w.clear()
        return logits, errors, received

    def _update(self, scheduled, results) -> None:
        logits, errors, received = results
        for req in self.waiting:
            if req.req_id in received:
                self._received.add(req.req_id)
                bad = self._first_bad_token(req, errors)
                req.num_computed = req.loaded_tokens = min(req.num_external, bad)
        for req, s in scheduled:
            bad = self._first_bad_token(req, errors)
            if bad < s.num_computed_tokens + s.num_scheduled_tokens:
                req.num_computed = min(s.num_computed_tokens, bad)  # recompute from there
                req.loaded_tokens = min(req.loaded_tokens, req.num_computed)
                req.rewinds += 1
                self.rewound.append((self.steps, req.req_id))
                continue
            req.num_computed += s.num_scheduled_tokens
            if req.num_computed >= len(req.prompt) + len(req.output):
                if req.first_logits is None:
                    req.first_logits = logits[req.req_id]
                req.output.append(int(logits[req.req_id].argmax()))
            if len(req.output) >= req.max_new_tokens:
                self._finish(req)

    def _first_bad_token(self, req: Request, errors: Set[int]) -> int:
        for i, block in enumerate(req.block_ids):
            if block in errors:
                return i * self.cache.block_size
        return 1 << 62

    def _finish(self, req: Request) -> None:
        self.running.remove(req)
        req.status = "finished"
        if self.scheduler is not None:
            self.finish_replies[req.req_id] = self.scheduler.on_finished(req.req_id)
        self.cache.free(req.block_ids)  # request_finished said False: free now
        self._finished_ids.add(req.req_id)
        self.done[req.req_id] = req


class SyntheticModel:
    """KV that is a pure function of (token, position, layer): what recompute would write.

    forward() checks, after each layer's wait, that the past it would attend to is exactly
    that; a mismatch is recorded (the harness must then have been told the block failed).
    """

    def __init__(self, geometry: KVGeometry):
        self.geometry = geometry
        self.bad_past: List[tuple] = []  # (step, req_id, layer, start) where the past was wrong
        self.step = 0

    def kv(self, tokens: List[int], start: int, layer: int):
        g = self.geometry
        t = torch.as_tensor(tokens, dtype=torch.long)[:, None, None]
        p = torch.arange(start, start + len(tokens))[:, None, None]
        base = t * 1009 + p * 31 + layer * 7919 + torch.arange(g.kv_heads)[None, :, None] * 97 \
            + torch.arange(g.head_dim)[None, None, :]
        return (base % 251).to(g.dtype), ((base * 3 + 1) % 253).to(g.dtype)

    def past_is_right(self, cache: PagedCache, req: Request, layer: int, tokens: int) -> bool:
        k, v = cache.read(layer, req.block_ids, tokens)
        ek, ev = self.kv(req.tokens[:tokens], 0, layer)
        return torch.equal(k, ek) and torch.equal(v, ev)

    def forward(self, req: Request, start: int, end: int, cache: PagedCache, wait_layer: WaitLayer):
        for layer in range(self.geometry.layers):
            wait_layer(layer)
            if start and not self.past_is_right(cache, req, layer, start):
                self.bad_past.append((self.step, req.req_id, layer, start))
            cache.write(layer, req.block_ids, start, *self.kv(req.tokens[start:end], start, layer))
        return torch.tensor([float(sum(req.tokens[:end]) % 7)])  # any deterministic "logits"


class TinyModel:
    """examples/tiny_transformer.py over the paged cache: layer i's past is gathered from the
    request's blocks only when the layer asks for it, after wait_for_layer_load(i)."""

    def __init__(self, transformer):
        self.transformer = transformer

    def forward(self, req: Request, start: int, end: int, cache: PagedCache, wait_layer: WaitLayer):
        past = _LazyPast(cache, req.block_ids, start, wait_layer) if start else None
        logits, kv = self.transformer.forward(torch.tensor(req.tokens[start:end], dtype=torch.long), past)
        for layer, (k, v) in enumerate(kv):  # [heads, tokens, dim] -> the paged [tokens, heads, dim]
            cache.write(layer, req.block_ids, start, k[:, start:].transpose(0, 1), v[:, start:].transpose(0, 1))
        return logits[-1]


class _LazyPast:
    def __init__(self, cache: PagedCache, block_ids: List[int], tokens: int, wait_layer: WaitLayer):
        self._cache, self._ids, self._tokens, self._wait = cache, list(block_ids), tokens, wait_layer
        self._layers: Dict[int, tuple] = {}

    def __len__(self) -> int:
        return len(self._cache.layers)

    def __getitem__(self, layer: int):
        if layer not in self._layers:
            self._wait(layer)
            k, v = self._cache.read(layer, self._ids, self._tokens)
            self._layers[layer] = (k.transpose(0, 1), v.transpose(0, 1))
        return self._layers[layer]
