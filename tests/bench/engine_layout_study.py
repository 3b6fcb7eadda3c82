"""adr/0011's measurement: one file per block with layer ranges, or files per layer group.

`gpucache-engine-bench --cases layout_study` stores the same 512 MiB (16 blocks of 32 layers
of 1 MiB) as 1, 4 or 32 files per block, through the mount and directly, with the same
commit protocol (writev from a staging tensor) and the same parallel preadv reads as the
connector, and prints per layout: save, warm load and cold load in GB/s, gpucache and direct.
"""

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from gpucache.client import MountClient
from gpucache.identity import CacheIdentity

LAYER = 1 << 20
LAYERS = 32
BLOCKS = 16


def identity(tenant, block, group, files_per_block, seed):
    chain = [bytes([seed, block, group]) * 11]
    return CacheIdentity.create(
        tenant=tenant, trust_domain="local", model_revision="layout-study@1", model_config_digest="sha256:x",
        tokenizer_revision="t@1", chain=chain, kv_dtype="bfloat16", quant_format="none",
        layout_abi="layout-study-%d" % files_per_block, position_encoding="rope", rope_theta=1e4,
        rope_scaling="none", rope_factor=1.0, block_capacity=256, valid_length=256)


class Layout:
    def __init__(self, root, files_per_block, pool, staging, seed, plain_directory=False):
        self.client = MountClient(root, plain_directory=plain_directory)
        self.per_file = LAYERS // files_per_block
        self.files = [(b, g, identity("acme", b, g, files_per_block, seed))
                      for b in range(BLOCKS) for g in range(files_per_block)]
        self.pool, self.staging = pool, staging

    def _layers(self, block, group):
        first = (block * LAYERS + group * self.per_file) * LAYER
        return [self.staging[first + i * LAYER:first + (i + 1) * LAYER] for i in range(self.per_file)]

    def save(self):
        t = time.perf_counter()
        list(self.pool.map(lambda f: self.client.commit(f[2], self._layers(f[0], f[1])), self.files))
        return time.perf_counter() - t

    def load(self):
        """Layer-major like the connector: every file opened once, one preadv per layer."""
        t = time.perf_counter()
        fds = list(self.pool.map(lambda f: os.open(self.client.path_of(f[2]), os.O_RDONLY), self.files))
        tasks = [(fd, i, buf) for fd, f in zip(fds, self.files) for i, buf in enumerate(self._layers(f[0], f[1]))]
        tasks.sort(key=lambda x: x[1])
        list(self.pool.map(lambda x: os.preadv(x[0], [x[2]], x[1] * LAYER), tasks))
        for fd in fds:
            os.close(fd)
        return time.perf_counter() - t

    def evict(self, backing_of):
        for _, _, ident in self.files:
            for path in (self.client.path_of(ident), backing_of(ident)):
                if path:
                    fd = os.open(path, os.O_RDONLY)
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)

    def delete(self, is_mount):
        for _, _, ident in self.files:
            if is_mount:
                self.client.control({"op": "evict", "path": ident.relative_path()})
            else:
                os.unlink(self.client.path_of(ident))


def run(daemon, direct_root, threads, repeat):
    staging = memoryview(torch.ones(BLOCKS * LAYERS * LAYER, dtype=torch.uint8).numpy())
    nbytes = BLOCKS * LAYERS * LAYER
    pool = ThreadPoolExecutor(threads)
    sides = ((daemon.mnt, lambda i: os.path.join(daemon.data, "blocks", i.relative_path())),
             (direct_root, lambda i: None))
    for files_per_block in (1, 4, 32):
        results = {}
        for root, backing in sides:
            runs = {"save": [], "warm": [], "cold": []}
            previous = None
            for r in range(repeat + 1):  # round 0 warms up, as in engine_bench
                layout = Layout(root, files_per_block, pool, staging, seed=(r + 10 * files_per_block) % 256,
                                plain_directory=root != daemon.mnt)  # the direct side's plain files
                seconds = layout.save()
                if previous:
                    previous.delete(root == daemon.mnt)
                previous = layout
                if r:
                    runs["save"].append(nbytes / seconds / 1e9)
                    layout.load()
                    runs["warm"].append(nbytes / layout.load() / 1e9)
                    layout.evict(backing)
                    runs["cold"].append(nbytes / layout.load() / 1e9)
            previous.delete(root == daemon.mnt)
            results[root] = {k: statistics.median(v) for k, v in runs.items()}
        g, d = results[daemon.mnt], results[direct_root]
        print("# layout_study files_per_block=%d (%d MiB each): save %.2f/%.2f warm load %.2f/%.2f "
              "cold load %.2f/%.2f GB/s gpucache/direct" %
              (files_per_block, LAYERS // files_per_block, g["save"], d["save"], g["warm"], d["warm"],
               g["cold"], d["cold"]), flush=True)
