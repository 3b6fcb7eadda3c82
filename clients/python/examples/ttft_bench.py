"""Time to first token with a gpucache hit versus full recompute (a tool, not a test).

    GPUCACHE_BUILD_DIR=build /usr/bin/python3 clients/python/examples/ttft_bench.py [--sizes 1024,4096,16384]

For each prefix size: request 1 prefills prefix + 64 tokens and saves the KV through the
connector; request 2 shares the prefix and adds 32 tokens. Both run on the small engine of
kv_reuse_demo.py (vLLM's call order, paged KV, chunked prefill of 512 aligned tokens). Prints:
    case=ttft prefix=N hit_ms=.. recompute_ms=.. speedup=.. load_wait_ms=.. cached_tokens=.. same_first_token=..
The hit time covers the lookup, the layer-wise load, the prefill of the rest and the first
token (the worker half persists across tries, as in a serving engine, so its staging buffers
are allocated once); load_wait_ms is how long the forward pass waited in wait_for_layer_load.
Starts its own
gpucachefs (GPUCACHE_BUILD_DIR) unless --mount MNT --tenant T is given.
"""

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests"), HERE]

import torch  # noqa: E402

from engine_harness import Request  # noqa: E402
from gpucache.connector_worker import WorkerCore  # noqa: E402
from kv_reuse_demo import connector_config, make_engine, make_model, mounted, run  # noqa: E402


class TimedWaits:
    """Wraps a worker's wait_for_layer to add up the time the forward pass spent in it."""

    def __init__(self, worker):
        self.seconds = 0.0
        self._wait = worker.wait_for_layer
        worker.wait_for_layer = self

    def __call__(self, layer):
        t = time.perf_counter()
        self._wait(layer)
        self.seconds += time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,4096,16384")
    ap.add_argument("--mount")
    ap.add_argument("--tenant", default="acme")
    ap.add_argument("--repeat", type=int, default=3, help="hit measurements per size (best kept)")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    with mounted(args) as mnt:
        model = make_model()
        config = connector_config(mnt, args.tenant, model)
        g = config.geometry
        print("# model d_model=%d heads=%d layers=%d, %d threads, KV %d bytes/token, block %d tokens" %
              (model.d_model, model.heads, model.layers, torch.get_num_threads(),
               g.payload_bytes // g.block_tokens, g.block_tokens), flush=True)
        for size in [int(s) for s in args.sizes.split(",")]:
            rng = random.Random(size)
            prefix = [rng.randrange(model.vocab) for _ in range(size)]
            first = prefix + [rng.randrange(model.vocab) for _ in range(64)]
            second = prefix + [rng.randrange(model.vocab) for _ in range(32)]
            blocks = 2 * (len(first) + len(second)) // 16 + 64
            run(make_engine(model, config, num_blocks=blocks), Request("1", first))

            t = time.perf_counter()
            full = run(make_engine(model, num_blocks=blocks), Request("r", second))
            recompute = time.perf_counter() - t

            best, wait_best, hit = float("inf"), float("inf"), None
            worker = WorkerCore(config)  # one engine's worker across the tries, as in a server
            waits = TimedWaits(worker)
            for i in range(args.repeat):
                engine = make_engine(model, config, num_blocks=blocks, worker=worker)
                waits.seconds = 0.0
                t = time.perf_counter()
                hit = run(engine, Request("h%d" % i, second))
                best, wait_best = min(best, time.perf_counter() - t), min(wait_best, waits.seconds)
            same = hit.output == full.output and torch.equal(hit.first_logits, full.first_logits)
            print("case=ttft prefix=%d hit_ms=%.1f recompute_ms=%.1f speedup=%.1f load_wait_ms=%.1f "
                  "cached_tokens=%d same_first_token=%s" %
                  (size, best * 1e3, recompute * 1e3, recompute / best, wait_best * 1e3,
                   hit.loaded_tokens, same), flush=True)


if __name__ == "__main__":
    main()
