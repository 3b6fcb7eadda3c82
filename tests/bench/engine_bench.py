"""The engine connector's data path: gpucache against the same code on plain files (a tool).

    build/gpucache-engine-bench [--cases ...] [--repeat 3] [--io-threads 4] [--ram-promote read|commit]

Mounts its own gpucachefs (GPUCACHE_BUILD_DIR) in a scratch directory; the `direct` side is a
directory beside the daemon's data directory (same file system), written and read by the same
connector code with no FUSE. Llama-3-8B's KV geometry (32 layers, 8 KV heads, head dim 128,
bf16: 128 KiB per token) in vLLM's paged layout with 16-token engine blocks, 4096 tokens
= 16 gpucache blocks of 256 tokens = 512 MiB. Each case alternates the two sides `--repeat`
times and prints the medians, one line per case:

    case=NAME gpucache=X direct=Y ratio=R unit=GB/s

ratio = gpucache / direct. Cold loads first drop the page cache of exactly the files read
(posix_fadvise DONTNEED on the backing files and on the mount's own pages). load_layerwise
also prints, as a comment, the time until layer 0 is usable and until all layers are.
load_after_save_llama8b_4k loads each round's blocks right after saving them (before any other
read: what the RAM tier's `--ram-promote read|commit` changes, adr/0020 decision 5);
load_after_pause_llama8b_4k (not among the default cases) does so once the daemon has no copy
pending, as a next turn arriving a little later would.
`--cases layout_study` measures adr/0011's choice instead (engine_layout_study.py).
"""

import argparse
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.join(HERE, "..", "..", "clients", "python")
sys.path[:0] = [PYTHON, os.path.join(PYTHON, "tests"), HERE]

import torch  # noqa: E402

from daemon import Daemon  # noqa: E402
from gpucache.block_names import BlockNamer, ModelIdentity  # noqa: E402
from gpucache.client import MountClient  # noqa: E402
from gpucache.connector_scheduler import SchedulerCore  # noqa: E402
from gpucache.connector_types import ConnectorConfig, RequestView, ScheduledRequest, StepInfo  # noqa: E402
from gpucache.connector_worker import WorkerCore  # noqa: E402
from gpucache.kv_layout import KVGeometry  # noqa: E402
from gpucache.vllm_hash import none_hash, request_block_hashes  # noqa: E402

LLAMA8B = KVGeometry(layers=32, kv_heads=8, head_dim=128, dtype=torch.bfloat16, engine_block_size=16,
                     block_tokens=256)
MODEL = ModelIdentity(tenant="acme", model_revision="meta-llama/Meta-Llama-3-8B@bench",
                      model_config_digest="sha256:bench", tokenizer_revision="llama3-tok@bench",
                      rope_theta=500000.0)
CASES = ("load_llama8b_4k_warm", "load_llama8b_4k_cold", "load_layerwise", "save_llama8b_4k",
         "load_after_save_llama8b_4k")


class Side:
    """One connector (scheduler and worker halves) over one root and one paged cache."""

    def __init__(self, name, root, cache, args):
        self.name, self.root, self.cache = name, root, cache
        cfg = ConnectorConfig(root=root, model=MODEL, geometry=LLAMA8B, hash_seed="0",
                              io_threads=args.io_threads, save_threads=args.save_threads,
                              plain_directory=name == "direct")  # the baseline: plain files
        self.scheduler = SchedulerCore(cfg)
        self.worker = WorkerCore(cfg)
        self.worker.register(cache)
        self.namer = BlockNamer(MODEL, LLAMA8B)
        self._n = 0

    def _alloc(self, tokens, load):
        self._n += 1
        view = RequestView("%s-%d" % (self.name, self._n), tokens)
        ext, _ = self.scheduler.lookup(view, 0)
        assert ext == (len(tokens) - 1 if load else 0), (self.name, ext)
        ids = list(range(len(tokens) // 16 + 1))
        self.scheduler.on_alloc(view, ids, ext)
        computed = ext if load else 0
        step = StepInfo([ScheduledRequest(view.req_id, computed, len(tokens) - computed, ids, True)])
        self.worker.bind(self.scheduler.build_meta(step))

    def save(self, tokens):
        """Seconds from the first save_kv_layer until every block is committed."""
        self._alloc(tokens, load=False)
        t = time.perf_counter()
        for layer, paged in enumerate(self.cache):
            self.worker.save_layer(layer, paged)
        self.worker.wait_for_save()
        self.worker.drain()
        elapsed = time.perf_counter() - t
        self.worker.clear()
        assert not self.worker.stats.skipped_commits, self.worker.stats.skipped_commits
        return elapsed

    def load(self, tokens):
        """(seconds until layer 0 is in the paged cache, seconds until every layer is)."""
        self._alloc(tokens, load=True)
        t = time.perf_counter()
        self.worker.start_load()
        self.worker.wait_for_layer(0)
        first = time.perf_counter() - t
        for layer in range(1, LLAMA8B.layers):
            self.worker.wait_for_layer(layer)
        every = time.perf_counter() - t
        self.worker.get_finished(set())
        assert not self.worker.take_load_errors()
        self.worker.clear()
        return first, every

    def delete(self, tokens):
        for path in self.files(tokens):
            if self.name == "gpucache":  # the daemon's way: evict (as an admin)
                MountClient(self.root).control({"op": "evict", "path": os.path.relpath(path, self.root)})
            else:
                os.unlink(path)

    def files(self, tokens):
        hashes = request_block_hashes(tokens, 16, "0")
        return [os.path.join(self.root, self.namer.identity(c).relative_path())
                for c in self.namer.chains(hashes, none_hash("0"))]


def cpu_seconds(pid):
    """User + system CPU time of a process so far (/proc/PID/stat, fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of the daemon and of this process over the measured parts of a case."""

    def __init__(self, daemon_pid):
        self.pid, self.daemon, self.client, self.wall = daemon_pid, 0.0, 0.0, 0.0

    def measure(self, fn, *args):
        d, c, t = cpu_seconds(self.pid), time.process_time(), time.perf_counter()
        result = fn(*args)
        self.daemon += cpu_seconds(self.pid) - d
        self.client += time.process_time() - c
        self.wall += time.perf_counter() - t
        return result

    def report(self, case):
        print("# %s through the mount: %.2f s wall, CPU %.2f s in the daemon, %.2f s in the engine "
              "process (%d cores)" % (case, self.wall, self.daemon, self.client, os.cpu_count()), flush=True)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def daemon_settled(daemon, timeout=120):
    """Waits until the daemon has no RAM-tier copy queued or in progress (a pause between turns)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(os.path.join(daemon.mnt, ".gpucache", "metrics")) as f:
            if "gpucache_ram_promotions_pending 0\n" in f.read():
                return
        time.sleep(0.05)
    raise RuntimeError("RAM-tier copies still pending after %d s" % timeout)


def paged_cache(blocks):
    cache = [torch.empty((2, blocks, 16, 8, 128), dtype=torch.bfloat16) for _ in range(LLAMA8B.layers)]
    for layer in cache:  # random bits: what a forward pass wrote
        layer.view(torch.uint8).copy_(torch.randint(0, 256, layer.view(torch.uint8).shape, dtype=torch.uint8))
    return cache


def prompt(seed, tokens):
    rng = random.Random(seed)
    return [rng.randrange(128000) for _ in range(tokens + 1)]  # the last token is computed


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9


def line(case, g, d):
    print("case=%s gpucache=%.2f direct=%.2f ratio=%.2f unit=GB/s" % (case, g, d, g / d), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--io-threads", type=int, default=4, help="parallel reads (ConnectorConfig.io_threads)")
    ap.add_argument("--save-threads", type=int, default=4, help="parallel commits (ConnectorConfig.save_threads)")
    ap.add_argument("--ram-promote", choices=("read", "commit"), default="read",
                    help="the mount's [ram] promote (adr/0020): when blocks are copied into the RAM tier")
    args = ap.parse_args()
    cases = args.cases.split(",")
    torch.set_num_threads(os.cpu_count())
    nbytes = args.tokens // LLAMA8B.block_tokens * LLAMA8B.payload_bytes
    daemon = Daemon('[ram]\npromote = "%s"\n' % args.ram_promote)
    try:
        direct_root = os.path.join(daemon.tmp, "direct")
        os.makedirs(os.path.join(direct_root, MODEL.tenant))
        if "layout_study" in cases:  # adr/0011; not among the default cases
            import engine_layout_study
            engine_layout_study.run(daemon, direct_root, args.io_threads, args.repeat)
            cases = [c for c in cases if c != "layout_study"]
            if not cases:
                return
        cache = paged_cache(args.tokens // 16 + 16)
        sides = [Side("gpucache", daemon.mnt, cache, args), Side("direct", direct_root, cache, args)]
        print("# %d tokens, %d MiB of KV in %d blocks of %d MiB, %d read threads, %d commit threads, "
              "%d cores" % (args.tokens, nbytes >> 20, args.tokens // 256, LLAMA8B.payload_bytes >> 20,
                            args.io_threads, args.save_threads, os.cpu_count()), flush=True)
        saves = {s.name: [] for s in sides}
        after_save = {s.name: [] for s in sides}
        meters = {c: CpuMeter(daemon.proc.pid) for c in ("save", "warm", "cold")}
        stored = None
        # Saving is also how the load cases get their blocks. Round 0 warms up; after each
        # round the previous one's blocks are deleted, as eviction would, so every round
        # allocates in a file system in the same state (new ext4 block groups cost a bitmap
        # read from disk the first time: 0.4 against 2.3 GB/s for plain writes here).
        for r in range(max(1, args.repeat) + 1):
            tokens = prompt(r, args.tokens)
            for s in sides:
                seconds = meters["save"].measure(s.save, tokens) if r and s.name == "gpucache" else s.save(tokens)
                if r:
                    saves[s.name].append(gbps(nbytes, seconds))
                if r and "load_after_pause_llama8b_4k" in cases:  # the next turn, a while later
                    if s.name == "gpucache":
                        daemon_settled(daemon)
                    after_save[s.name].append(gbps(nbytes, s.load(tokens)[1]))
                elif r and "load_after_save_llama8b_4k" in cases:  # a second request right behind the first
                    after_save[s.name].append(gbps(nbytes, s.load(tokens)[1]))
                if stored is not None:
                    s.delete(stored)
            stored = tokens
        if "save_llama8b_4k" in cases:
            line("save_llama8b_4k", statistics.median(saves["gpucache"]), statistics.median(saves["direct"]))
            meters["save"].report("save_llama8b_4k")
        if "load_after_save_llama8b_4k" in cases or "load_after_pause_llama8b_4k" in cases:
            line("load_after_pause_llama8b_4k" if "load_after_pause_llama8b_4k" in cases else "load_after_save_llama8b_4k", statistics.median(after_save["gpucache"]),
                 statistics.median(after_save["direct"]))
        run_loads(cases, sides, stored, nbytes, args.repeat, daemon, meters)
    finally:
        daemon.close()


def run_loads(cases, sides, tokens, nbytes, repeat, daemon, meters):
    for s in sides:
        s.load(tokens)  # brings the pages in (the saves bypassed the page cache)
    warm = {s.name: [] for s in sides}
    first = {s.name: [] for s in sides}
    cold = {s.name: [] for s in sides}
    for _ in range(repeat):
        for s in sides:
            f, every = meters["warm"].measure(s.load, tokens) if s.name == "gpucache" else s.load(tokens)
            warm[s.name].append(gbps(nbytes, every))
            first[s.name].append(f)
        if "load_llama8b_4k_cold" in cases:
            for s in sides:
                for path in s.files(tokens):
                    evict(path)  # for gpucache: the mount's pages ...
                    if s.name == "gpucache":  # ... and the backing file's
                        evict(os.path.join(daemon.data, "blocks", os.path.relpath(path, daemon.mnt)))
                load = meters["cold"].measure(s.load, tokens) if s.name == "gpucache" else s.load(tokens)
                cold[s.name].append(gbps(nbytes, load[1]))
    med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in
           (("warm", warm), ("first", first), ("cold", cold)) if all(d.values())}
    if "load_llama8b_4k_warm" in cases:
        line("load_llama8b_4k_warm", med["warm"]["gpucache"], med["warm"]["direct"])
        meters["warm"].report("load_llama8b_4k_warm")
    if "load_llama8b_4k_cold" in cases:
        line("load_llama8b_4k_cold", med["cold"]["gpucache"], med["cold"]["direct"])
        meters["cold"].report("load_llama8b_4k_cold")
    if "load_layerwise" in cases:
        line("load_layerwise", med["warm"]["gpucache"], med["warm"]["direct"])
        per_layer = {n: nbytes / med["warm"][n] / 1e9 / LLAMA8B.layers * 1e3 for n in med["warm"]}
        print("# load_layerwise: layer 0 usable after %.1f ms (direct %.1f ms), all %d layers after "
              "%.1f ms (direct %.1f ms): %.2f ms per layer (direct %.2f ms)" %
              (med["first"]["gpucache"] * 1e3, med["first"]["direct"] * 1e3, LLAMA8B.layers,
               nbytes / med["warm"]["gpucache"] / 1e6, nbytes / med["warm"]["direct"] / 1e6,
               per_layer["gpucache"], per_layer["direct"]), flush=True)


if __name__ == "__main__":
    main()
