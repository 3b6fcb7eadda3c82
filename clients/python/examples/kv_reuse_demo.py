"""Demo: a second request reuses the KV of a shared prefix through a gpucache mount.

    GPUCACHE_BUILD_DIR=build /usr/bin/python3 clients/python/examples/kv_reuse_demo.py [--prefix 4096]

Starts its own gpucachefs (from GPUCACHE_BUILD_DIR) in a scratch directory, or uses
--mount MNT --tenant T. A small engine (tests/engine_harness.py: vLLM's scheduling and
connector call order, a paged KV cache) runs tiny_transformer.py with the gpucache connector.
Request 1 prefills a long prompt and saves its KV; request 2 shares the prefix: the connector
finds the longest stored prefix, loads it layer by layer, and the engine prefills only the rest
and decodes. The same request is then recomputed without the connector and the outputs compared.
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

from engine_harness import EngineHarness, PagedCache, Request, TinyModel  # noqa: E402
from gpucache.block_names import ModelIdentity  # noqa: E402
from gpucache.connector_scheduler import SchedulerCore  # noqa: E402
from gpucache.connector_types import ConnectorConfig  # noqa: E402
from gpucache.connector_worker import WorkerCore  # noqa: E402
from gpucache.kv_layout import KVGeometry  # noqa: E402
from tiny_transformer import TinyTransformer  # noqa: E402

CHUNK = 512  # chunked prefill, aligned to absolute positions (as vLLM's)


def make_model():
    return TinyTransformer(vocab=1024, d_model=512, heads=8, layers=4)


def connector_config(mnt, tenant, model, block_tokens=256, **changes):
    """The connector's configuration for `model` (changes: ModelIdentity fields, or dtype)."""
    dtype = changes.pop("dtype", torch.float32)
    ident = dict(tenant=tenant, model_revision="tiny-transformer@seed0",
                 model_config_digest="sha256:d%d-l%d" % (model.d_model, model.layers),
                 tokenizer_revision="tiny-tok@1", rope_theta=model.rope_theta)
    ident.update(changes)
    geometry = KVGeometry(layers=model.layers, kv_heads=model.heads, head_dim=model.head_dim,
                          dtype=dtype, engine_block_size=16, block_tokens=block_tokens)
    return ConnectorConfig(root=mnt, model=ModelIdentity(**ident), geometry=geometry, hash_seed="0")


def make_engine(model, config=None, num_blocks=2048, chunk=CHUNK, worker=None):
    """An engine over a fresh paged cache, with the connector when config is given (and the
    given worker half, which keeps its threads and staging buffers, as an engine's does)."""
    geometry = config.geometry if config else KVGeometry(
        layers=model.layers, kv_heads=model.heads, head_dim=model.head_dim, dtype=torch.float32,
        engine_block_size=16, block_tokens=256)
    scheduler = SchedulerCore(config) if config else None
    if config and worker is None:
        worker = WorkerCore(config)
    return EngineHarness(scheduler, worker, PagedCache(geometry, num_blocks), TinyModel(model), chunk)


def run(engine, req):
    engine.add(req)
    engine.run()
    if engine.worker is not None:
        engine.worker.drain()  # saves finish in the background; a demo waits for them
    return req


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
        config = connector_config(mnt, args.tenant, model)
        rng = random.Random(0)
        prefix = [rng.randrange(1024) for _ in range(args.prefix)]
        first = prefix + [rng.randrange(1024) for _ in range(100)]
        second = prefix + [rng.randrange(1024) for _ in range(50)]

        t = time.perf_counter()
        one = make_engine(model, config)
        run(one, Request("1", first))
        print("request 1: prefilled %d tokens, saved %d blocks (%.2f s)" %
              (len(first), one.worker.stats.committed_blocks, time.perf_counter() - t))

        t = time.perf_counter()
        hit = run(make_engine(model, config), Request("2", second, max_new_tokens=16))
        hit_s = time.perf_counter() - t
        print("request 2: loaded %d tokens, prefilled %d, decoded %s (%.2f s)" %
              (hit.loaded_tokens, len(second) - hit.loaded_tokens, hit.output[:6], hit_s))

        t = time.perf_counter()
        full = run(make_engine(model), Request("2", second, max_new_tokens=16))
        full_s = time.perf_counter() - t
        print("recompute: decoded %s (%.2f s)" % (full.output[:6], full_s))
        same = hit.output == full.output
        print("same output: %s; %.1fx faster with the cache" % (same, full_s / hit_s))
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
