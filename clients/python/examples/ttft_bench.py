"""Time to first token with a gpucache hit versus full recompute (a tool, not a test).

    GPUCACHE_BUILD_DIR=build /usr/bin/python3 clients/python/examples/ttft_bench.py [--sizes 1024,4096,16384]

For each prefix size: request 1 prefills prefix + 64 tokens and saves the KV; request 2 shares the
prefix and adds 32 tokens. Prints one line per size:
    case=ttft prefix=N hit_ms=.. recompute_ms=.. speedup=.. load_ms=.. load_MBps=.. same_first_token=..
The hit time covers probe, load through the mount, prefill of the rest, and the first token.
Starts its own gpucachefs (GPUCACHE_BUILD_DIR) unless --mount MNT --tenant T is given.
"""

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests"), HERE]

import torch  # noqa: E402

from kv_reuse_demo import make_adapter, make_model, mounted  # noqa: E402

CHUNK = 512


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
        adapter = make_adapter(mnt, args.tenant, model)
        print("# model d_model=%d heads=%d layers=%d, %d threads, KV %d bytes/token, block %d tokens" %
              (model.d_model, model.heads, model.layers, torch.get_num_threads(),
               adapter.block_bytes() // adapter.block_tokens, adapter.block_tokens), flush=True)
        for size in [int(s) for s in args.sizes.split(",")]:
            rng = random.Random(size)
            prefix = [rng.randrange(model.vocab) for _ in range(size)]
            first = prefix + [rng.randrange(model.vocab) for _ in range(64)]
            second = prefix + [rng.randrange(model.vocab) for _ in range(32)]
            _, _, kv = model.generate(first, 1, chunk=CHUNK)
            adapter.save(first, kv)
            del kv

            t = time.perf_counter()
            full_tokens, _, _ = model.generate(second, 1, chunk=CHUNK)
            recompute = time.perf_counter() - t

            best, load_best = float("inf"), float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                cached = adapter.probe(second)
                cached, past = adapter.load(second, cached)
                loaded = time.perf_counter() - t
                hit_tokens, _, _ = model.generate(second, 1, past=past, cached_tokens=cached, chunk=CHUNK)
                total = time.perf_counter() - t
                best, load_best = min(best, total), min(load_best, loaded)
            mb = cached * adapter.block_bytes() / adapter.block_tokens / 1e6
            print("case=ttft prefix=%d hit_ms=%.1f recompute_ms=%.1f speedup=%.1f load_ms=%.1f "
                  "load_MBps=%.0f cached_tokens=%d same_first_token=%s" %
                  (size, best * 1e3, recompute * 1e3, recompute / best, load_best * 1e3,
                   mb / load_best, cached, hit_tokens == full_tokens), flush=True)


if __name__ == "__main__":
    main()
