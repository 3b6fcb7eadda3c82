"""Demo: a second request reuses the KV of a shared prefix through a gpucache mount.

    GPUCACHE_BUILD_DIR=build /usr/bin/python3 clients/python/examples/kv_reuse_demo.py [--prefix 4096]

Starts its own gpucachefs (from GPUCACHE_BUILD_DIR) in a scratch directory, or uses
--mount MNT --tenant T. Request 1 prefills a long prompt and saves its KV; request 2 shares the
prefix: it probes the longest committed prefix, loads it, prefills only the rest and decodes.
The same request is then recomputed from scratch and the outputs compared.
"""

import argparse
import contextlib
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "tests"), HERE]

import torch  # noqa: E402

from gpucache.engine import KVBlockAdapter, ModelSpec  # noqa: E402
from tiny_transformer import TinyTransformer  # noqa: E402


def make_model():
    return TinyTransformer(vocab=1024, d_model=512, heads=8, layers=4)


def make_adapter(mnt, tenant, model):
    spec = ModelSpec(model_revision="tiny-transformer@seed0", model_config_digest="sha256:d512-l4",
                     tokenizer_revision="tiny-tok@1", layers=model.layers, heads=model.heads,
                     head_dim=model.head_dim, rope_theta=model.rope_theta)
    return KVBlockAdapter(mnt, spec, tenant=tenant, block_tokens=256, unit_tokens=16)


@contextlib.contextmanager
def mounted(args):
    """args.mount if given, else a gpucachefs of our own (GPUCACHE_BUILD_DIR) for the duration."""
    if args.mount:
        yield args.mount
        return
    from daemon import Daemon
    daemon = Daemon()
    try:
        yield daemon.mnt
    finally:
        daemon.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", type=int, default=4096, help="shared prefix tokens")
    ap.add_argument("--mount")
    ap.add_argument("--tenant", default="acme")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    with mounted(args) as mnt:
        model = make_model()
        adapter = make_adapter(mnt, args.tenant, model)
        rng = random.Random(0)
        prefix = [rng.randrange(1024) for _ in range(args.prefix)]
        first = prefix + [rng.randrange(1024) for _ in range(100)]
        second = prefix + [rng.randrange(1024) for _ in range(50)]

        t = time.perf_counter()
        _, _, kv = model.generate(first, 1, chunk=512)
        saved = adapter.save(first, kv)
        print("request 1: prefilled %d tokens, saved %d blocks (%.2f s)" %
              (len(first), saved, time.perf_counter() - t))

        t = time.perf_counter()
        probed = adapter.probe(second)
        cached, past = adapter.load(second)
        hit_tokens, _, _ = model.generate(second, 16, past=past, cached_tokens=cached, chunk=512)
        hit_s = time.perf_counter() - t
        print("request 2: probe %d tokens, loaded %d, prefilled %d, decoded %s (%.2f s)" %
              (probed, cached, len(second) - cached, hit_tokens[:6], hit_s))

        t = time.perf_counter()
        full_tokens, _, _ = model.generate(second, 16, chunk=512)
        full_s = time.perf_counter() - t
        print("recompute: decoded %s (%.2f s)" % (full_tokens[:6], full_s))
        print("same output: %s; %.1fx faster with the cache" % (hit_tokens == full_tokens, full_s / hit_s))
        return 0 if hit_tokens == full_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
