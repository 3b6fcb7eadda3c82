"""Shared set-up for the connector tests: a small geometry, configs, engines, block paths."""

import os

import torch

from engine_harness import EngineHarness, PagedCache, SyntheticModel
from gpucache.block_names import BlockNamer, ModelIdentity
from gpucache.connector_scheduler import SchedulerCore
from gpucache.connector_types import ConnectorConfig
from gpucache.connector_worker import WorkerCore
from gpucache.kv_layout import KVGeometry
from gpucache.vllm_hash import none_hash, request_block_hashes

BLOCK = 64  # tokens per gpucache block: 4 engine blocks of 16
GEOMETRY = KVGeometry(layers=4, kv_heads=2, head_dim=64, dtype=torch.bfloat16, engine_block_size=16,
                      block_tokens=BLOCK)
MODEL = ModelIdentity(tenant="acme", model_revision="synthetic@1", model_config_digest="sha256:l4-h2-d64",
                      tokenizer_revision="tok@1")
SEED = "0"


def config(root, geometry=GEOMETRY, **kw):
    return ConnectorConfig(root=root, model=MODEL, geometry=geometry, hash_seed=SEED, io_threads=3, **kw)


def engine(cfg, kv_tuple=False, num_blocks=96, chunk=BLOCK):
    """A harness with a synthetic model on a fresh paged cache; returns (harness, model)."""
    model = SyntheticModel(cfg.geometry)
    h = EngineHarness(SchedulerCore(cfg), WorkerCore(cfg), PagedCache(cfg.geometry, num_blocks, kv_tuple),
                      model, chunk)
    return h, model


def identities(cfg, prompt):
    g = cfg.geometry
    namer = BlockNamer(cfg.model, g)
    hashes = request_block_hashes(prompt, g.engine_block_size, SEED)
    return [namer.identity(c) for c in namer.chains(hashes, none_hash(SEED))]


def backing_path(daemon, ident):
    return os.path.join(daemon.data, "blocks", ident.relative_path())


def garbage_past(harness, model, req_id):
    """Steps where the model saw a wrong past for req_id without the engine being told."""
    told = {step for step, rid in harness.rewound if rid == req_id}
    return [step for step, rid, *_ in model.bad_past if rid == req_id and step not in told]
