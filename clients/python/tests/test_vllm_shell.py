"""The vLLM-facing shell imports and translates without vLLM (label engine, no mount).

vLLM is not installed here, so its objects are stood in for by plain namespaces carrying the
attribute names the shell reads (Request, KVCacheBlocks, SchedulerOutput, VllmConfig). What
matters is tested on the core (test_connector); this checks the translation only.
"""

import errno
import os
import tempfile
import unittest
from types import SimpleNamespace as NS

import torch

from gpucache import vllm_connector
from gpucache.vllm_connector import GpucacheConnector, GpucacheConnectorMetadata


COMMIT = "5206a32e1c2d6b8d9a7f0e3b4c5d6e7f8a9b0c1d"


class Resolved(str):
    """huggingface_hub's ResolvedRevision as vLLM 0.32's ModelConfig keeps it: the name asked
    for ("main" when none was), the commit it resolved to in .resolved."""

    def __new__(cls, resolved, initial=None):
        revision = super().__new__(cls, initial if initial is not None else "main")
        revision.resolved = resolved
        return revision


def vllm_config(mount, cache_dtype="auto", **cache):
    hf = NS(rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                "original_max_position_embeddings": 8192})
    model = NS(model="meta-llama/Llama-3.1-8B", revision=COMMIT, tokenizer="meta-llama/Llama-3.1-8B",
               tokenizer_revision=None, quantization=None, dtype=torch.bfloat16, hf_config=hf,
               get_num_layers=lambda pc: 2, get_num_kv_heads=lambda pc: 2, get_head_size=lambda: 32)
    return NS(model_config=model, cache_config=NS(block_size=16, cache_dtype=cache_dtype, **cache),
              parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=1, rank=0),
              kv_transfer_config=NS(kv_connector_extra_config={
                  "mount": mount, "tenant": "acme", "model_config_digest": "sha256:cfg",
                  "block_tokens": 32, "hash_seed": "0", "plain_directory": True}))


def request(req_id, tokens):
    return NS(request_id=req_id, prompt_token_ids=tokens, lora_request=None, cache_salt=None)


def scheduler_output(req_id, tokens, block_ids, computed):
    new = NS(req_id=req_id, prompt_token_ids=tokens, block_ids=(block_ids,), num_computed_tokens=computed)
    cached = NS(req_ids=[], resumed_from_preemption=[], new_block_ids=[], num_computed_tokens=[])
    return NS(scheduled_new_reqs=[new], scheduled_cached_reqs=cached,
              num_scheduled_tokens={req_id: len(tokens) - computed}, finished_req_ids=set())


class VllmShellTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        os.mkdir(os.path.join(self.tmp.name, "acme"))
        self.config = vllm_config(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_it_imports_without_vllm_and_has_the_connector_method_set(self):
        self.assertFalse(vllm_connector.HAVE_VLLM)
        for name in vllm_connector.connector_methods():
            self.assertTrue(callable(getattr(GpucacheConnector, name)), name)

    def test_a_save_then_a_load_through_the_shell(self):
        # vLLM's GPU backends: [2, num_blocks, block_size, kv_heads, head_dim] per layer.
        self.save_then_load({"layers.%d.attn" % i: torch.randn(2, 16, 16, 2, 32).to(torch.bfloat16)
                             for i in range(2)}, lambda layer, ids: layer[:, ids], start_after_forward=False)

    def test_the_cpu_backend_layout_and_start_load_kv_after_the_forward(self):
        # vLLM's CPU_ATTN: [num_blocks, kv_heads, block_size, 2 * head_dim], K then V per
        # (block, head); and vLLM 0.32 calls start_load_kv after the forward (after the saves)
        # in a step without synchronous loads.
        self.save_then_load({"layers.%d.attn" % i: torch.randn(16, 2, 16, 64).to(torch.bfloat16)
                             for i in range(2)}, lambda layer, ids: layer[ids], start_after_forward=True)

    # Regression (review, 2026-12-06): FLASH_ATTN keeps a layer in CPU_ATTN's 4-D shape but
    # splits K and V per token; the connector read every 4-D cache as CPU_ATTN's, so a GPU
    # engine stored its KV misplaced, and a CPU engine (or one on another backend) loaded it.
    def test_a_flash_attention_engine_stores_what_a_cpu_engine_loads(self):
        blocks, heads, size, dim = 16, 2, 16, 32
        cpu = {"layers.%d.attn" % i: torch.randn(blocks, heads, size, 2 * dim).to(torch.bfloat16)
               for i in range(2)}
        flash = {}
        for name, layer in cpu.items():  # the same K and V, in FLASH_ATTN's order
            kv = layer.view(blocks, heads, 2, size, dim)
            flash[name] = torch.cat([kv[:, :, 0], kv[:, :, 1]], dim=-1).contiguous()
        self.assertFalse(torch.equal(flash["layers.0.attn"], cpu["layers.0.attn"]))
        tokens = list(range(100, 100 + 70))
        original = vllm_connector.attention_backends if hasattr(vllm_connector, "attention_backends") else None
        try:
            backend = {"name": "FLASH_ATTN"}
            vllm_connector.attention_backends = lambda config, names: {n: backend["name"] for n in names}
            sched = GpucacheConnector(self.config, NS(name="SCHEDULER"))
            saver = GpucacheConnector(self.config, NS(name="WORKER"))
            saver.register_kv_caches(flash)
            sched.get_num_new_matched_tokens(request("a", tokens), 0)
            sched.update_state_after_alloc(request("a", tokens), NS(get_block_ids=lambda: ([0, 1, 2, 3, 4],)), 0)
            saver.bind_connector_metadata(sched.build_connector_meta(scheduler_output("a", tokens, [0, 1, 2, 3, 4], 0)))
            for name, layer in flash.items():
                saver.save_kv_layer(name, layer, None)
            saver.wait_for_save()
            saver._worker.drain()
            saver.shutdown()

            backend["name"] = "CPU_ATTN"
            loader = GpucacheConnector(self.config, NS(name="WORKER"))
            loaded = {name: torch.zeros_like(layer) for name, layer in cpu.items()}
            loader.register_kv_caches(loaded)
            self.assertEqual(sched.get_num_new_matched_tokens(request("b", tokens), 0), (64, False))
            sched.update_state_after_alloc(request("b", tokens), NS(get_block_ids=lambda: ([8, 9, 10, 11, 12],)), 64)
            loader.bind_connector_metadata(sched.build_connector_meta(scheduler_output("b", tokens, [8, 9, 10, 11, 12], 64)))
            loader.start_load_kv(None)
            for name in loaded:
                loader.wait_for_layer_load(name)
            loader.get_finished(set())
            self.assertEqual(loader.get_block_ids_with_load_errors(), set())
            for name in cpu:
                self.assertTrue(torch.equal(loaded[name][8:12], cpu[name][0:4]))
            loader.shutdown()
        finally:
            if original is not None:
                vllm_connector.attention_backends = original

    def test_an_attention_backend_of_unknown_layout_is_refused_at_registration(self):
        original = vllm_connector.attention_backends
        try:
            vllm_connector.attention_backends = lambda config, names: {n: "FLASHINFER" for n in names}
            worker = GpucacheConnector(self.config, NS(name="WORKER"))
            with self.assertRaisesRegex(ValueError, "FLASHINFER"):
                worker.register_kv_caches({"layers.0.attn": torch.zeros(2, 16, 16, 2, 32)})
            worker.shutdown()
        finally:
            vllm_connector.attention_backends = original

    # Regression (review, 2026-12-06): request_view read only the token ids, LoRA name and
    # salt: two prompts with the same image placeholder tokens and different images got the
    # same block paths (the second loaded the first image's KV), and a prompt given as
    # embeddings (prompt_token_ids None) raised TypeError inside vLLM's scheduler.
    def test_requests_with_images_or_prompt_embeddings_match_nothing_and_save_nothing(self):
        tokens = [1, 2, 3, 4] + [151655] * 60 + [5, 6]  # an image's placeholder tokens
        sched = GpucacheConnector(self.config, NS(name="SCHEDULER"))
        image = request("cat", tokens)
        image.mm_features = [NS(modality="image", identifier="cat-jpg", mm_position=NS(offset=4, length=60))]
        embeds = request("embeds", None)
        embeds.prompt_embeds = torch.zeros(66, 8)
        mixed = request("mixed", tokens)
        mixed.prompt_embeds = torch.zeros(66, 8)
        for req in (image, embeds, mixed):
            with self.subTest(req.request_id):
                self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
                sched.update_state_after_alloc(req, NS(get_block_ids=lambda: ([0, 1, 2, 3, 4],)), 0)
                meta = sched.build_connector_meta(scheduler_output(req.request_id, tokens, [0, 1, 2, 3, 4], 0))
                self.assertEqual((meta.step.loads, meta.step.saves), ([], []))
                self.assertEqual(sched.request_finished(req, [0, 1, 2, 3, 4]), (False, None))
        self.assertEqual(sched._scheduler.uncacheable, {"multimodal inputs": 1, "prompt embeddings": 2})
        self.assertEqual(vllm_connector.request_view(request("text", tokens)).uncacheable, None)

    # Regression (review, 2026-12-06): --kv-cache-dtype was ignored (a string in vLLM 0.32):
    # an fp8 KV cache (uint8 tensors) was staged as the model's bfloat16, so saves converted
    # byte values to floats, loads raised, and the identity named the blocks bfloat16.
    def test_the_kv_cache_dtype_is_the_identitys_and_fp8_bytes_round_trip(self):
        from gpucache.block_names import BlockNamer
        from gpucache.vllm_connector import config_from_vllm
        for cache_dtype, dtype, name in (("auto", torch.bfloat16, "bfloat16"), ("bfloat16", torch.bfloat16, "bfloat16"),
                                         ("fp8", torch.uint8, "fp8_e4m3"), ("fp8_e4m3", torch.uint8, "fp8_e4m3"),
                                         ("fp8_e5m2", torch.uint8, "fp8_e5m2")):
            with self.subTest(cache_dtype):
                cfg, model = config_from_vllm(vllm_config(self.tmp.name, cache_dtype))
                self.assertEqual(cfg.geometry.dtype, dtype)
                self.assertEqual(BlockNamer(model, cfg.geometry).identity([b"\0" * 32]).kv_dtype, name)
        for bad in ("fp8_inc", "nvfp4", "int8_per_token_head", "fp8_ds_mla", "turboquant_k8v4"):
            with self.subTest(bad), self.assertRaisesRegex(ValueError, "kv-cache-dtype %s is not supported" % bad):
                GpucacheConnector(vllm_config(self.tmp.name, bad), NS(name="SCHEDULER"))
        with self.assertRaisesRegex(ValueError, "skip-layers"):
            GpucacheConnector(vllm_config(self.tmp.name, "fp8", kv_cache_dtype_skip_layers=["0"]), NS(name="WORKER"))
        worker = GpucacheConnector(vllm_config(self.tmp.name, "fp8"), NS(name="WORKER"))
        with self.assertRaisesRegex(ValueError, "torch.bfloat16, the connector expected torch.uint8"):
            worker.register_kv_caches({"layers.0.attn": torch.zeros(2, 16, 16, 2, 32, dtype=torch.bfloat16)})
        worker.shutdown()
        # fp8 bytes (every value 0-255, NaN patterns included) save and load bit for bit.
        self.config = vllm_config(self.tmp.name, "fp8_e5m2")
        self.save_then_load({"layers.%d.attn" % i: torch.randint(0, 256, (16, 2, 16, 64), dtype=torch.uint8)
                             for i in range(2)}, lambda layer, ids: layer[ids], start_after_forward=True)

    # Regression (review, 2026-12-07): an explicit float --kv-cache-dtype other than the model's
    # dtype was accepted and named the blocks after it; vLLM's CPU backend wrote the model's
    # float32 values into them anyway, and an engine of that dtype loaded them as NaN.
    def test_a_float_kv_cache_dtype_other_than_the_models_is_refused(self):
        from gpucache.vllm_connector import config_from_vllm
        for requested in ("float16", "half", "float32", "float"):
            with self.subTest(requested), self.assertRaisesRegex(
                    ValueError, "--kv-cache-dtype %s differs from the model dtype torch.bfloat16" % requested):
                GpucacheConnector(vllm_config(self.tmp.name, requested), NS(name="WORKER"))
        config = vllm_config(self.tmp.name, "float16")
        config.model_config.dtype = torch.float16  # the model's own dtype, named explicitly: fine
        cfg, model = config_from_vllm(config)
        self.assertEqual((cfg.geometry.dtype, model.kv_dtype), (torch.float16, "float16"))

    # Regression (review, 2026-12-07): vLLM 0.32's kv_load_failure_policy defaults to "fail"
    # and the documented command left it out, so one failed block load (a checksum EIO, an
    # eviction between probe and load) failed the user's request instead of recomputing.
    def test_a_load_failure_policy_other_than_recompute_is_refused(self):
        for policy in ("fail", None):
            config = vllm_config(self.tmp.name)
            config.kv_transfer_config.kv_load_failure_policy = policy
            for role in ("SCHEDULER", "WORKER"):
                with self.subTest(policy=policy, role=role), self.assertRaisesRegex(
                        ValueError, '"kv_load_failure_policy" is .*Add "kv_load_failure_policy": "recompute"'):
                    GpucacheConnector(config, NS(name=role))
        config = vllm_config(self.tmp.name)
        config.kv_transfer_config.kv_load_failure_policy = "recompute"
        GpucacheConnector(config, NS(name="SCHEDULER"))
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "engine-integration.md")) as f:
            self.assertTrue('"kv_load_failure_policy": "recompute"' in f.read(), "the documented command lacks it")
        self.assertTrue('"kv_load_failure_policy": "recompute"' in vllm_connector.__doc__, "the docstring's command lacks it")

    # Regression (review, 2026-12-08): a KV cache of several groups (vLLM's hybrid layouts) was
    # taken, and group 0's block ids applied to every layer: other groups' KV at wrong blocks.
    def test_a_kv_cache_of_several_groups_is_refused(self):
        group = NS(layer_names=["layers.0.attn", "layers.1.attn"], kv_cache_spec=NS(block_size=16))
        for role in ("SCHEDULER", "WORKER"):
            with self.subTest(role), self.assertRaisesRegex(ValueError, "2 KV cache groups.*handles one"):
                GpucacheConnector(self.config, NS(name=role), NS(kv_cache_groups=[group, group]))
            GpucacheConnector(self.config, NS(name=role), NS(kv_cache_groups=[group]))

    # Regression (review, 2026-12-07): the connector took any directory as its mount, so with
    # no gpucachefs mounted it committed to the local disk and loaded those files back.
    def test_a_mount_without_gpucachefs_is_refused_unless_opted_in(self):
        config = vllm_config(self.tmp.name)
        del config.kv_transfer_config.kv_connector_extra_config["plain_directory"]
        for role in ("SCHEDULER", "WORKER"):
            with self.subTest(role), self.assertRaisesRegex(OSError, "not a gpucachefs mount") as caught:
                GpucacheConnector(config, NS(name=role))
            self.assertEqual(caught.exception.errno, errno.ENOTCONN)
        config.kv_transfer_config.kv_connector_extra_config["plain_directory"] = "true"
        GpucacheConnector(config, NS(name="SCHEDULER"))

    # Regression (review, 2026-12-06): with no --revision the model was named "<model>@main"
    # whatever its weights: a local directory whose weights were replaced (a new fine-tune at
    # the same path) kept naming the same blocks, and loaded KV of the old weights.
    def test_a_local_model_without_a_revision_is_named_by_its_files(self):
        from gpucache.vllm_connector import config_from_vllm
        model_dir = os.path.join(self.tmp.name, "my-model")
        os.mkdir(model_dir)
        weights = os.path.join(model_dir, "model.safetensors")
        for name, data in (("config.json", b"{}"), ("model.safetensors", b"v1 weights")):
            with open(os.path.join(model_dir, name), "wb") as f:
                f.write(data)
        os.utime(weights, ns=(10**18, 10**18))

        def revision(**extra):
            config = vllm_config(self.tmp.name)
            config.model_config.model = config.model_config.tokenizer = model_dir
            config.model_config.revision = None
            config.kv_transfer_config.kv_connector_extra_config.update(extra)
            return config_from_vllm(config)[1].model_revision

        first = revision()
        self.assertTrue(first.startswith(model_dir + "@local-"), first)
        self.assertEqual(revision(), first)  # the same files: the same name, on every rank
        with open(weights, "wb") as f:
            f.write(b"v2 weights")  # same size, new mtime
        second = revision()
        self.assertNotEqual(second, first)
        os.utime(weights, ns=(10**18, 10**18))
        with open(weights, "ab") as f:
            f.write(b"!")
        os.utime(weights, ns=(10**18, 10**18))  # same mtime, new size
        self.assertNotIn(revision(), (first, second))
        self.assertEqual(revision(model_revision="my-model@sha256:abc"), "my-model@sha256:abc")
        self.assertEqual(config_from_vllm(self.config)[1].model_revision, "meta-llama/Llama-3.1-8B@" + COMMIT)

    # Regression (review, 2026-12-07): a missing required key was a bare KeyError.
    def test_a_missing_required_key_is_named(self):
        from gpucache.vllm_connector import config_from_vllm
        for key in ("mount", "tenant", "model_config_digest"):
            config = vllm_config(self.tmp.name)
            del config.kv_transfer_config.kv_connector_extra_config[key]
            with self.subTest(key), self.assertRaisesRegex(ValueError, "needs '%s'" % key):
                config_from_vllm(config)

    # Regression (review, 2026-12-06): a repo id without --revision was named "@main", which
    # moves; now its cached snapshot's commit, or a refusal at construction.
    def test_a_repo_id_without_a_revision_and_no_cached_snapshot_is_refused(self):
        config = vllm_config(self.tmp.name)
        config.model_config.model = "acme/no-such-model-%d" % os.getpid()
        config.model_config.revision = None
        config.load_config = NS(download_dir=self.tmp.name)
        with self.assertRaisesRegex(ValueError, "give vLLM --revision or kv_connector_extra_config"):
            GpucacheConnector(config, NS(name="SCHEDULER"))

    # Regression (review, 2026-12-06): a model path with a space or a non-ASCII character (or
    # a LoRA name with one) made every block identity invalid, and get_num_new_matched_tokens
    # raised ValueError inside vLLM's scheduler for every request.
    def test_a_model_path_with_a_space_works_and_a_bad_tenant_is_refused_at_construction(self):
        model_dir = os.path.join(self.tmp.name, "My Modèl")
        os.mkdir(model_dir)
        with open(os.path.join(model_dir, "model.safetensors"), "wb") as f:
            f.write(b"weights")
        config = vllm_config(self.tmp.name)
        config.model_config.model = config.model_config.tokenizer = model_dir
        config.model_config.revision = None
        sched = GpucacheConnector(config, NS(name="SCHEDULER"))
        self.assertIn("/My%20Mod%C3%A8l@local-", sched._scheduler.config.model.model_revision)
        lora = request("lora", list(range(100)))
        lora.lora_request = NS(lora_name="mon adaptateur é", lora_path="/adapters/é")
        for req in (request("plain", list(range(100))), lora):
            self.assertEqual(sched.get_num_new_matched_tokens(req, 0), (0, False))
        for field, value in (("tenant", "Acme Corp"), ("model_config_digest", "")):
            with self.subTest(field), self.assertRaisesRegex(ValueError, "GpucacheConnector: "):
                config = vllm_config(self.tmp.name)
                config.kv_transfer_config.kv_connector_extra_config[field] = value
                GpucacheConnector(config, NS(name="SCHEDULER"))

    # Regression (review, 2026-12-06): save_threads defaulted to 2 in the shell while the docs
    # and ConnectorConfig said 4.
    def test_unset_extra_config_keys_take_the_documented_defaults(self):
        from gpucache.connector_types import ConnectorConfig
        from gpucache.vllm_connector import config_from_vllm
        cfg, _ = config_from_vllm(self.config)
        for key, documented in (("io_threads", 4), ("save_threads", 4), ("cold_refill", False),
                                ("cold_budget_bytes", 256 << 20), ("cold_deadline_s", 2.0),
                                ("load_staging_layers", 4), ("staging_keep_bytes", 1 << 30)):
            self.assertEqual(getattr(cfg, key), documented, key)
            self.assertEqual(getattr(ConnectorConfig, key), documented, key)
        self.config.kv_transfer_config.kv_connector_extra_config["save_threads"] = 3
        self.assertEqual(config_from_vllm(self.config)[0].save_threads, 3)
        # A key given as null takes its default (review, 2026-12-08: int(None) raised).
        self.config.kv_transfer_config.kv_connector_extra_config.update(
            {key: None for key in ("io_threads", "save_threads", "cold_refill", "cold_budget_bytes",
                                   "cold_deadline_s", "trust_domain", "block_tokens",
                                   "load_staging_layers", "staging_keep_bytes")})
        cfg, model = config_from_vllm(self.config)
        self.assertEqual((cfg.io_threads, cfg.save_threads, cfg.cold_refill, model.trust_domain,
                          cfg.geometry.block_tokens, cfg.load_staging_layers, cfg.staging_keep_bytes),
                         (4, 4, False, "local", 256, 4, 1 << 30))
        extra = self.config.kv_transfer_config.kv_connector_extra_config
        extra.update({"load_staging_layers": 2, "staging_keep_bytes": 0})
        cfg, _ = config_from_vllm(self.config)
        self.assertEqual((cfg.load_staging_layers, cfg.staging_keep_bytes), (2, 0))
        for key, bad in (("load_staging_layers", 0), ("staging_keep_bytes", -1)):
            with self.subTest(key), self.assertRaisesRegex(ValueError, key):
                config_from_vllm(self.config)  # (the other key keeps its good value)
                extra[key] = bad
                config_from_vllm(self.config)
            extra[key] = {"load_staging_layers": 2, "staging_keep_bytes": 0}[key]

    # Regression (review, 2026-12-08): vLLM 0.32 keeps --revision as huggingface_hub's
    # ResolvedRevision, a str whose value is "main" when no revision was given (the commit is
    # in .resolved); the connector named the model "<repo>@main", a moving name: once the repo's
    # main moved to new weights, engines loaded blocks computed with the old ones.
    def test_a_resolved_revision_names_its_commit_and_a_moving_name_is_refused(self):
        from gpucache.vllm_connector import config_from_vllm
        config = vllm_config(self.tmp.name)
        config.load_config = NS(download_dir=self.tmp.name)  # a Hugging Face cache without the repo
        for revision in (Resolved(COMMIT), Resolved(COMMIT, "v1.0"), Resolved(COMMIT, COMMIT), COMMIT):
            with self.subTest(repr(revision)):
                config.model_config.revision = revision
                self.assertEqual(config_from_vllm(config)[1].model_revision, "meta-llama/Llama-3.1-8B@" + COMMIT)
        for revision in ("main", "v1.0", COMMIT[:7], Resolved("not-a-commit")):
            with self.subTest(revision), self.assertRaisesRegex(ValueError, "is not a commit"):
                config.model_config.revision = revision
                GpucacheConnector(config, NS(name="SCHEDULER"))

    # Regression (review, 2026-12-08): register_kv_caches took every KV cache vLLM gave and
    # checked only its dtype. With a speculative-decoding drafter (EAGLE) vLLM gives the
    # drafter's layers KV caches too: save_kv_layer(<a drafter layer>) indexed past the
    # staging and an IndexError escaped into vLLM's forward pass; a cache of another block
    # size, KV head count or head size would have been copied misplaced.
    def test_kv_caches_other_than_the_models_layers_are_refused_at_registration(self):
        def caches(n, shape=(2, 16, 16, 2, 32)):
            return {"model.layers.%d.self_attn.attn" % i: torch.zeros(shape, dtype=torch.bfloat16)
                    for i in range(n)}
        eagle = caches(2)
        eagle["drafter.layers.0.self_attn.attn"] = torch.zeros(2, 16, 16, 2, 32, dtype=torch.bfloat16)
        cases = [(eagle, "KV caches for 3 layers, the model .* 2 \\(the extra ones: "
                         "drafter.layers.0.self_attn.attn\\): speculative decoding"),
                 (caches(1), "KV caches for 1 layers, the model .* 2: ")]
        for shape in ((2, 16, 32, 2, 32), (2, 16, 16, 4, 32), (2, 16, 16, 2, 64), (16, 4, 16, 64)):
            cases.append((caches(2, shape), "KV cache model.layers.0.self_attn.attn holds K and V as .* "
                                            "expected \\[blocks, 16, 2, 32\\]"))
        for kv, message in cases:
            with self.subTest(message):
                worker = GpucacheConnector(self.config, NS(name="WORKER"))
                with self.assertRaisesRegex(ValueError, message):
                    worker.register_kv_caches(kv)
                worker.shutdown()

    # Regression (review, 2026-12-08): decode (prefill) context parallelism was not refused:
    # a scheduler block id then covers block_size x DCP tokens and each rank keeps every
    # DCP-th token, so blocks were saved and loaded with other tokens' KV. And pp_rank was
    # rank // tp, past pp_size for a rank beyond TP x PP; vLLM's layout is DP x PP x TP.
    def test_context_parallelism_is_refused_and_ranks_are_vllms(self):
        from gpucache.vllm_connector import config_from_vllm
        for key, flag in (("decode_context_parallel_size", "decode"), ("prefill_context_parallel_size", "prefill")):
            with self.subTest(key), self.assertRaisesRegex(ValueError, "--%s-context-parallel-size 2 is not supported" % flag):
                config = vllm_config(self.tmp.name)
                setattr(config.parallel_config, key, 2)
                GpucacheConnector(config, NS(name="WORKER"))
        config = vllm_config(self.tmp.name)
        config.parallel_config.decode_context_parallel_size = config.parallel_config.prefill_context_parallel_size = 1
        config.parallel_config.tensor_parallel_size = config.parallel_config.pipeline_parallel_size = 2
        for rank, tp_rank, pp_rank in ((0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1), (4, 0, 0), (7, 1, 1)):
            model = config_from_vllm(config, rank)[1]
            self.assertEqual((model.tp_rank, model.tp_size, model.pp_rank, model.pp_size), (tp_rank, 2, pp_rank, 2), rank)

    # Regression (review, 2026-12-08): "hash_seed": 0 (a JSON number) stayed an int, and the
    # chain's root none_hash(0) is not vLLM's none_hash("0") (vLLM reads PYTHONHASHSEED as a
    # string): every block was named apart from those of engines seeded with "0".
    def test_a_numeric_hash_seed_is_taken_as_vllms_string(self):
        from gpucache.vllm_connector import config_from_vllm
        from gpucache.vllm_hash import none_hash
        extra = self.config.kv_transfer_config.kv_connector_extra_config
        for seed, expected in ((0, "0"), ("0", "0"), (42, "42"), (None, None)):
            with self.subTest(seed):
                extra["hash_seed"] = seed
                self.assertEqual(config_from_vllm(self.config)[0].hash_seed, expected)
        extra["hash_seed"] = 0
        self.assertEqual(none_hash(config_from_vllm(self.config)[0].seed()), none_hash("0"))
        for bad in (1.5, True, [0]):
            with self.subTest(bad), self.assertRaisesRegex(ValueError, "hash_seed"):
                extra["hash_seed"] = bad
                config_from_vllm(self.config)

    # Regression (review, 2026-12-08): cold_refill was bool(value), so "false" turned the cold
    # refill on; a null RoPE factor or original_max_position_embeddings (or theta) in the
    # model's config raised TypeError at construction.
    def test_boolean_keys_are_parsed_strictly_and_null_rope_fields_take_their_defaults(self):
        from gpucache.vllm_connector import config_from_vllm
        extra = self.config.kv_transfer_config.kv_connector_extra_config
        for value, expected in ((True, True), (False, False), ("true", True), ("false", False),
                                ("False", False), ("1", True), ("0", False), (None, False)):
            with self.subTest(value):
                extra["cold_refill"] = value
                self.assertIs(config_from_vllm(self.config)[0].cold_refill, expected)
        for bad in ("no", "yes", "", 2, 0.5):
            with self.subTest(bad), self.assertRaisesRegex(ValueError, "cold_refill"):
                extra["cold_refill"] = bad
                config_from_vllm(self.config)
        del extra["cold_refill"]
        self.config.model_config.hf_config = NS(rope_theta=None, rope_scaling={
            "rope_type": "llama3", "factor": None, "original_max_position_embeddings": None})
        model = config_from_vllm(self.config)[1]
        self.assertEqual((model.rope_theta, model.rope_scaling, model.rope_factor, model.rope_original_max_positions),
                         (10000.0, "llama3", 1.0, 0))
        self.config.model_config.hf_config = NS(rope_parameters={"rope_type": "default", "rope_theta": None},
                                                rope_theta=500000.0)
        model = config_from_vllm(self.config)[1]
        self.assertEqual((model.rope_theta, model.rope_scaling), (500000.0, "none"))

    # Regression (review, 2026-12-08): vLLM's tokenizer defaults to the model's path, and the
    # identity's tokenizer field was "<tokenizer>@<its revision or main>": two engines loading
    # the same weights from different local paths under the same "model_revision" (the
    # documented way to share) still named different namespaces.
    def test_the_models_own_tokenizer_takes_the_model_revision(self):
        from gpucache.block_names import BlockNamer
        from gpucache.vllm_connector import config_from_vllm

        def named(path, tokenizer=None, its_revision=None, **extra):
            config = vllm_config(self.tmp.name)
            config.model_config.model = path
            config.model_config.tokenizer = tokenizer or path
            config.model_config.revision = None
            config.model_config.tokenizer_revision = its_revision
            config.kv_transfer_config.kv_connector_extra_config.update(extra)
            cfg, model = config_from_vllm(config)
            return model.tokenizer_revision, BlockNamer(model, cfg.geometry).identity([bytes(32)]).namespace_name()

        shared = "meta-llama/Llama-3.1-8B@5206a32"
        a = named("/srv/a/llama", model_revision=shared)
        self.assertEqual(a, named("/srv/b/llama", model_revision=shared))
        self.assertEqual(a[0], shared)
        self.assertNotEqual(named("/srv/a/llama", model_revision=shared + "-ft")[1], a[1])
        # A tokenizer of its own (--tokenizer, or --tokenizer-revision) keeps its name and
        # revision, or takes "tokenizer_revision" as is.
        other = "0" * 40
        self.assertEqual(named("/srv/a/llama", "/srv/tok", model_revision=shared)[0], "/srv/tok@main")
        self.assertEqual(named("/srv/a/llama", "/srv/tok", Resolved(other, "v2"), model_revision=shared)[0],
                         "/srv/tok@" + other)
        self.assertEqual(named("/srv/a/llama", None, "v2", model_revision=shared)[0], "/srv/a/llama@v2")
        self.assertEqual(named("/srv/a/llama", "/srv/tok", model_revision=shared, tokenizer_revision="llama3-tok@1")[0],
                         "llama3-tok@1")
        self.assertEqual(config_from_vllm(self.config)[1].tokenizer_revision, "meta-llama/Llama-3.1-8B@" + COMMIT)

    def save_then_load(self, kv, blocks_of, start_after_forward):
        tokens = list(range(100, 100 + 70))  # two full 32-token blocks and a tail
        sched = GpucacheConnector(self.config, NS(name="SCHEDULER"))
        worker = GpucacheConnector(self.config, NS(name="WORKER"))
        worker.register_kv_caches(kv)

        self.assertEqual(sched.get_num_new_matched_tokens(request("a", tokens), 0), (0, False))
        sched.update_state_after_alloc(request("a", tokens), NS(get_block_ids=lambda: ([0, 1, 2, 3, 4],)), 0)
        meta = sched.build_connector_meta(scheduler_output("a", tokens, [0, 1, 2, 3, 4], 0))
        self.assertIsInstance(meta, GpucacheConnectorMetadata)
        worker.bind_connector_metadata(meta)
        if not start_after_forward:
            worker.start_load_kv(None)
        for name, layer in kv.items():
            worker.wait_for_layer_load(name)
            worker.save_kv_layer(name, layer, None)
        if start_after_forward:
            worker.start_load_kv(None)
        worker.wait_for_save()
        self.assertEqual(worker.get_finished(set()), (None, None))
        worker.clear_connector_metadata()
        self.assertEqual(sched.request_finished(request("a", tokens), [0, 1, 2, 3, 4]), (False, None))
        worker._worker.drain()

        self.assertEqual(sched.get_num_new_matched_tokens(request("b", tokens), 0), (64, False))
        sched.update_state_after_alloc(request("b", tokens), NS(get_block_ids=lambda: ([8, 9, 10, 11, 12],)), 64)
        worker.bind_connector_metadata(sched.build_connector_meta(scheduler_output("b", tokens, [8, 9, 10, 11, 12], 64)))
        worker.start_load_kv(None)
        for name in kv:
            worker.wait_for_layer_load(name)
        worker.get_finished(set())
        self.assertEqual(worker.get_block_ids_with_load_errors(), set())
        for layer in kv.values():
            self.assertTrue(torch.equal(blocks_of(layer, [8, 9, 10, 11]), blocks_of(layer, [0, 1, 2, 3])))
            self.assertFalse(torch.equal(blocks_of(layer, [12]), blocks_of(layer, [4])))
        worker.shutdown()


if __name__ == "__main__":
    unittest.main()
