"""GpucacheConnector: vLLM V1's KV connector (KVConnectorBase_V1) as a thin shell over the core.

vLLM loads it with (docs/engine-integration.md):

    --kv-transfer-config '{"kv_connector": "GpucacheConnector",
        "kv_connector_module_path": "gpucache.vllm_connector", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"mount": "/mnt/gpucache", "tenant": "acme",
            "model_config_digest": "sha256:...", "block_tokens": 256}}'

Everything here only translates vLLM's objects (Request, KVCacheBlocks, SchedulerOutput,
forward context) into the engine-neutral core (connector_scheduler, connector_worker), which
is what the tests drive. It imports without vLLM: the base classes are then stand-ins with the
metadata binding vLLM's base provides, so the core and this shell stay importable and testable
on a machine without vLLM.

vLLM's objects (configs, Request, KVCacheBlocks, SchedulerOutput, ForwardContext) are typed Any:
the shell reads only the attributes it names, which test_vllm_conformance and test_vllm_e2e
check against the real vLLM.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, cast

from .vllm_checks import (check_load_failure_policy, check_one_kv_cache_group, cpu_attention_isa,
                          pp_layer_range)

# The core imports torch (the paged KV tensors), which `pip install ./clients/python` does not
# bring (the [torch] and [vllm] extras do): it is imported where a connector is built or
# driven, so this module, and gpucache.GpucacheConnector, import without it. In vLLM, torch is
# always there.
if TYPE_CHECKING:
    from .block_names import ModelIdentity
    from .connector_scheduler import SchedulerCore
    from .connector_types import ConnectorConfig, RequestView, StepInfo, StepMeta
    from .connector_worker import WorkerCore
    from .kv_layout import PagedLayer

try:  # vLLM is only in build/venv (packaging/python-venv.sh): the vLLM tests, label engine
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                   KVConnectorMetadata, KVConnectorRole)
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

    class KVConnectorMetadata:  # type: ignore[no-redef]
        pass

    class KVConnectorBase_V1:  # type: ignore[no-redef]
        """The parts of vLLM's base class the shell relies on."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
            self._connector_metadata: Optional[KVConnectorMetadata] = None
            self._vllm_config = vllm_config
            self._kv_cache_config = kv_cache_config
            self._role = role

        def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self) -> None:
            self._connector_metadata = None

        def _get_connector_metadata(self) -> Optional[KVConnectorMetadata]:
            return self._connector_metadata

        def shutdown(self) -> None:
            return None

    KVConnectorRole = None  # type: ignore[assignment, misc]


class GpucacheConnectorMetadata(KVConnectorMetadata):
    def __init__(self, step: StepMeta):
        self.step = step


def _is_scheduler(role: Any) -> bool:
    return getattr(role, "name", str(role)).upper().endswith("SCHEDULER")


# vLLM's --kv-cache-dtype values the connector copies correctly: the torch dtype of the paged
# tensors (vLLM's STR_DTYPE_TO_TORCH_DTYPE, vllm/utils/torch_utils.py) and the identity's name
# of their bytes. The fp8 ones are stored as uint8 and copied byte for byte ("fp8" is e4m3).
# Others (fp8_inc, int8/int4/nvfp4 variants with per-token or block scales, MLA and turboquant
# formats) keep scales or packed data beside or inside the tensors in ways the block layout does
# not describe: refused.
_FLOAT_KV_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16",
                    "float32": "float32", "float": "float32"}
_FP8_KV_DTYPES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


def kv_cache_dtype(cache_config: Any, model_config: Any) -> Tuple[Any, str]:
    """(torch dtype of vLLM's paged KV tensors, the identity's kv_dtype) for --kv-cache-dtype.

    Raises ValueError for a KV cache dtype the connector cannot copy correctly.
    """
    import torch

    from .kv_layout import DTYPE_NAMES
    requested = cache_config.cache_dtype
    if isinstance(requested, torch.dtype):  # older vLLM configs
        requested = DTYPE_NAMES.get(requested, str(requested))
    requested = str(requested)
    if requested == "auto":  # the model's dtype
        dtype = model_config.dtype
        if dtype not in DTYPE_NAMES:
            raise ValueError("GpucacheConnector: the model dtype %s is not a supported KV dtype" % dtype)
        return dtype, DTYPE_NAMES[dtype]
    if requested in _FLOAT_KV_DTYPES:
        # Only the model's own dtype: vLLM's CPU backend does not support a float KV dtype of
        # its own and writes the model's values into the cache anyway (float32 bytes under the
        # name bfloat16, NaN to whoever loads them), and where a backend converts, the bytes
        # would depend on the compute dtype, which the identity does not name.
        name = _FLOAT_KV_DTYPES[requested]
        if DTYPE_NAMES.get(model_config.dtype) != name:
            raise ValueError("GpucacheConnector: --kv-cache-dtype %s differs from the model dtype %s: "
                             "use --kv-cache-dtype auto (or the model's dtype), or --dtype %s"
                             % (requested, model_config.dtype, name))
        return model_config.dtype, name
    if requested in _FP8_KV_DTYPES:
        if getattr(cache_config, "kv_cache_dtype_skip_layers", None):
            raise ValueError("GpucacheConnector: --kv-cache-dtype %s with --kv-cache-dtype-skip-layers "
                             "mixes KV dtypes across layers, which a block cannot describe" % requested)
        name = _FP8_KV_DTYPES[requested]
        if name == "fp8_e4m3" and _platform_fp8_is_fnuz():
            name = "fp8_e4m3fnuz"  # ROCm MI300: another encoding of the same bits
        return torch.uint8, name
    raise ValueError("GpucacheConnector: --kv-cache-dtype %s is not supported (supported: auto, %s)"
                     % (requested, ", ".join(sorted(set(_FLOAT_KV_DTYPES) | set(_FP8_KV_DTYPES)))))


def _platform_fp8_is_fnuz() -> bool:
    if not HAVE_VLLM:
        return False
    try:
        from vllm.platforms import current_platform
        return "fnuz" in str(current_platform.fp8_dtype())
    except Exception:  # no platform detected: vLLM's default, e4m3fn
        return False


def local_weights_digest(path: str) -> str:
    """A cheap fingerprint of a local model: names, sizes and mtimes of its files (a file, or
    every file under a directory but hidden ones), not their contents."""
    entries: List[Tuple[str, int, int]] = []
    if os.path.isdir(path):
        for top, dirs, files in os.walk(path, followlinks=True):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in files:
                if not f.startswith("."):
                    full = os.path.join(top, f)
                    st = os.stat(full)  # through symlinks (Hugging Face snapshots link to blobs)
                    entries.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
    else:
        st = os.stat(path)
        entries.append((os.path.basename(path), st.st_size, st.st_mtime_ns))
    entries.sort()
    return "local-" + hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:32]


_COMMIT = re.compile(r"[0-9a-f]{40}")


def _hub_commit(repo_id: str, cache_dirs: Iterable[Optional[str]], revision: Optional[str] = None) -> Optional[str]:
    """The commit of the Hugging Face snapshot `revision` (None: main) of a repo id resolves to
    in the local cache (its refs/)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for cache_dir in cache_dirs:
        try:
            found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir, revision=revision)
        except Exception:  # not a repo id, or an unreadable cache
            continue
        if isinstance(found, str):  # <cache>/models--org--name/snapshots/<commit>/config.json
            commit = os.path.basename(os.path.dirname(found))
            if _COMMIT.fullmatch(commit):
                return commit
    return None


def _resolved_commit(revision: Any) -> Optional[str]:
    """The commit a vLLM revision names for sure, if any.

    vLLM 0.32 resolves --revision against the hub (or the local refs/ cache) and keeps
    huggingface_hub's ResolvedRevision: a str whose value is the name asked for ("main" when
    none was) and whose .resolved is the commit. Without that, only a full commit hash pins
    the weights: a branch or tag name ("main", "v1") can move to other weights.
    """
    resolved = getattr(revision, "resolved", None)
    if isinstance(resolved, str) and _COMMIT.fullmatch(resolved):
        return resolved
    if isinstance(revision, str) and _COMMIT.fullmatch(revision):
        return str(revision)
    return None


def model_revision(vllm_config: Any, extra: Dict[str, Any]) -> str:
    """The identity's model_revision: what the engine's weights are.

    kv_connector_extra_config "model_revision" wins (used as is); then the commit vLLM's
    --revision resolved to, or --revision itself if it is a full commit hash; for a local
    model path, a digest of its files' names, sizes and mtimes; for a Hugging Face repo id, the
    commit its revision (main without one) has in the local cache. Nothing else: a moving name
    ("@main") would let blocks computed with old weights serve new ones.
    """
    mc = vllm_config.model_config
    if extra.get("model_revision"):
        return str(extra["model_revision"])
    commit = _resolved_commit(mc.revision)
    if commit is not None:
        return "%s@%s" % (mc.model, commit)
    if os.path.exists(mc.model):  # a revision name does not say which files a directory holds
        return "%s@%s" % (mc.model, local_weights_digest(mc.model))
    requested = str(mc.revision) if mc.revision else None
    download_dir = getattr(getattr(vllm_config, "load_config", None), "download_dir", None)
    commit = _hub_commit(mc.model, [download_dir, None] if download_dir else [None], requested)
    if commit is not None:
        return "%s@%s" % (mc.model, commit)
    if requested is not None:
        raise ValueError("GpucacheConnector: --revision %r of %r is not a commit, and neither vLLM nor the "
                         "local Hugging Face cache resolved it to one (a branch or tag can move to other "
                         "weights): give vLLM --revision <40-hex commit> or kv_connector_extra_config "
                         "\"model_revision\"" % (requested, mc.model))
    raise ValueError("GpucacheConnector: cannot tell which weights %r are: give vLLM --revision or "
                     "kv_connector_extra_config \"model_revision\" (e.g. \"%s@<commit>\")"
                     % (mc.model, mc.model))


def _revision_text(revision: Any) -> Optional[str]:
    commit = _resolved_commit(revision)
    return commit if commit is not None else (str(revision) if revision else None)


def tokenizer_revision(vllm_config: Any, extra: Dict[str, Any], model_rev: str) -> str:
    """The identity's tokenizer_revision.

    kv_connector_extra_config "tokenizer_revision" wins (used as is). vLLM's tokenizer is the
    model (its path or repo id) unless --tokenizer says otherwise, and its revision the
    model's unless --tokenizer-revision does: then the tokenizer is the one of the model's
    files and takes the model revision (so engines that share blocks through "model_revision"
    share them whatever their local paths). Otherwise "<tokenizer>@<its commit, revision, or
    main>".
    """
    if extra.get("tokenizer_revision"):
        return str(extra["tokenizer_revision"])
    mc = vllm_config.model_config
    tokenizer = getattr(mc, "tokenizer", None) or mc.model
    revision = _revision_text(getattr(mc, "tokenizer_revision", None))
    if tokenizer == mc.model and revision in (None, _revision_text(mc.revision)):
        return model_rev
    return "%s@%s" % (tokenizer, revision or "main")


def _flag(extra: Dict[str, Any], key: str, default: bool) -> bool:
    """A boolean key: JSON true/false or 1/0, or the strings "true"/"false" (any case) or
    "1"/"0"; absent or null: the default. Anything else is refused: bool("false") is True."""
    value = extra.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "false", "0"):
        return value.strip().lower() in ("true", "1")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError("GpucacheConnector: kv_connector_extra_config %r is %r: give true or false" % (key, value))


def _hash_seed(extra: Dict[str, Any]) -> Optional[str]:
    """vLLM reads PYTHONHASHSEED as a string and hashes that string: a JSON number is taken as
    its decimal text (0 -> "0"), anything else but a string refused; absent or null: None (the
    environment's)."""
    seed = extra.get("hash_seed")
    if seed is None or isinstance(seed, str):
        return seed
    if isinstance(seed, int) and not isinstance(seed, bool):
        return str(seed)
    raise ValueError("GpucacheConnector: kv_connector_extra_config \"hash_seed\" is %r: give "
                     "PYTHONHASHSEED's value, a string (or an integer)" % (seed,))


def parallel_ranks(parallel_config: Any, rank: int) -> Tuple[int, int]:
    """(tp_rank, pp_rank) of global rank `rank`: vLLM's rank layout is DP x PP x TP
    (ModelConfig.get_layers_start_end_indices), so ranks past TP x PP are other DP replicas."""
    tp = parallel_config.tensor_parallel_size
    return rank % tp, (rank // tp) % parallel_config.pipeline_parallel_size


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def config_from_vllm(vllm_config: Any, rank: int = 0) -> Tuple[ConnectorConfig, ModelIdentity]:
    """The core's configuration from vLLM's config and kv_connector_extra_config.

    Text fields are made identity names (block_names.identity_name: a model path with a space
    is escaped, not refused); what cannot be (a tenant outside [a-z0-9_-]) raises ValueError
    here, when the connector is built, never per request in the scheduler.
    """
    from .block_names import BlockNamer, ModelIdentity, identity_name
    from .identity import is_valid_tenant_name
    from .connector_types import ConnectorConfig
    from .kv_layout import KVGeometry, layout_abi
    check_load_failure_policy(vllm_config.kv_transfer_config)
    # A key given as null (JSON) is an unset one: it takes its default.
    extra: Dict[str, Any] = {key: value for key, value in
                             (vllm_config.kv_transfer_config.kv_connector_extra_config or {}).items()
                             if value is not None}
    missing = [key for key in ("mount", "tenant", "model_config_digest") if key not in extra]
    if missing:  # named here, not a bare KeyError from somewhere below
        raise ValueError("GpucacheConnector: kv_connector_extra_config needs %s (docs/engine-integration.md)"
                         % ", ".join(repr(key) for key in missing))
    mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    # Decode (prefill) context parallelism splits a block's tokens across ranks: a scheduler
    # block id covers block_size x DCP tokens and each rank keeps every DCP-th of them, which
    # the block layout does not describe.
    for key, flag in (("decode_context_parallel_size", "--decode-context-parallel-size"),
                      ("prefill_context_parallel_size", "--prefill-context-parallel-size")):
        size = getattr(pc, key, 1) or 1
        if size > 1:
            raise ValueError("GpucacheConnector: %s %d is not supported (context parallelism splits "
                             "each block's tokens across ranks)" % (flag, size))
    hf = mc.hf_config
    # transformers 5 keeps RoPE in `rope_parameters` (theta included, type "default" for plain
    # RoPE); older ones in `rope_theta` and `rope_scaling` (None for plain RoPE). A null value
    # is the default.
    rope = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    rope_type = str(rope.get("rope_type") or rope.get("type") or "none")
    tp, pp = pc.tensor_parallel_size, pc.pipeline_parallel_size
    tp_rank, pp_rank = parallel_ranks(pc, rank)
    dtype, kv_dtype = kv_cache_dtype(cc, mc)
    if not is_valid_tenant_name(extra["tenant"]):
        raise ValueError("GpucacheConnector: tenant %r: 1-64 of [a-z0-9_-], starting alphanumeric"
                         % (extra["tenant"],))
    model_rev = model_revision(vllm_config, extra)
    model = ModelIdentity(
        tenant=extra["tenant"], trust_domain=identity_name(str(extra.get("trust_domain", "local"))),
        model_revision=identity_name(model_rev),
        model_config_digest=identity_name(str(extra["model_config_digest"])),
        tokenizer_revision=identity_name(tokenizer_revision(vllm_config, extra, model_rev)),
        quant_format=identity_name(str(mc.quantization or "none")), tp_rank=tp_rank, tp_size=tp,
        pp_rank=pp_rank, pp_size=pp,
        rope_theta=float(_or(rope.get("rope_theta"), _or(getattr(hf, "rope_theta", None), 10000.0))),
        rope_scaling="none" if rope_type == "default" else rope_type,
        rope_factor=float(_or(rope.get("factor"), 1.0)),
        rope_original_max_positions=int(_or(rope.get("original_max_position_embeddings"), 0)),
        kv_dtype=kv_dtype,
        # What else fixes the bytes: the CPU backend's ISA, and which layers this pipeline
        # stage holds (neither changes the name on a GPU engine with one stage).
        layout_abi=layout_abi(cpu_attention_isa(vllm_config), pp_layer_range(mc, pp_rank, pp)))
    geometry = KVGeometry(
        layers=mc.get_num_layers(pc), kv_heads=mc.get_num_kv_heads(pc), head_dim=mc.get_head_size(),
        dtype=dtype, engine_block_size=cc.block_size, block_tokens=int(extra.get("block_tokens", 256)))
    config = ConnectorConfig(
        root=extra["mount"], model=model, geometry=geometry, hash_seed=_hash_seed(extra),
        # Unset keys take ConnectorConfig's defaults (the documented ones).
        io_threads=int(extra.get("io_threads", ConnectorConfig.io_threads)),
        save_threads=int(extra.get("save_threads", ConnectorConfig.save_threads)),
        cold_refill=_flag(extra, "cold_refill", ConnectorConfig.cold_refill),
        cold_budget_bytes=int(extra.get("cold_budget_bytes", ConnectorConfig.cold_budget_bytes)),
        cold_deadline_s=float(extra.get("cold_deadline_s", ConnectorConfig.cold_deadline_s)),
        load_staging_layers=int(extra.get("load_staging_layers", ConnectorConfig.load_staging_layers)),
        staging_keep_bytes=int(extra.get("staging_keep_bytes", ConnectorConfig.staging_keep_bytes)),
        plain_directory=_flag(extra, "plain_directory", ConnectorConfig.plain_directory))
    if config.load_staging_layers < 1 or config.staging_keep_bytes < 0:
        raise ValueError("GpucacheConnector: load_staging_layers must be at least 1 and "
                         "staging_keep_bytes at least 0 (got %d and %d)"
                         % (config.load_staging_layers, config.staging_keep_bytes))
    try:  # every field of every block but the chain and adapter is fixed now: check them once
        BlockNamer(model, geometry).identity([bytes(32)]).validate()
    except ValueError as e:
        raise ValueError("GpucacheConnector: the block identity would be invalid: %s" % e) from e
    return config, model


def request_view(request: Any) -> RequestView:
    from .connector_types import RequestView
    # The block hashes cover token ids, the LoRA adapter and the cache salt. Images, audio and
    # video (mm_features) and prompt embeddings change the KV without changing the token ids
    # (an image's placeholder tokens are the same for every image): such a request is not
    # cached at all, rather than named like another request whose KV differs.
    if getattr(request, "mm_features", None):
        return RequestView(request.request_id, [], uncacheable="multimodal inputs")
    if getattr(request, "prompt_embeds", None) is not None or request.prompt_token_ids is None:
        return RequestView(request.request_id, [], uncacheable="prompt embeddings")
    lora = getattr(request, "lora_request", None)
    return RequestView(request.request_id, list(request.prompt_token_ids),
                       lora.lora_name if lora is not None else None,
                       getattr(request, "cache_salt", None),
                       lora_path=lora.lora_path if lora is not None else None)


def _group0(block_ids: Any) -> Optional[List[int]]:
    """vLLM passes block ids per KV cache group; this connector handles one group (checked
    at construction: check_one_kv_cache_group)."""
    if block_ids is None:
        return None
    return list(block_ids[0]) if block_ids and isinstance(block_ids[0], (list, tuple)) else list(block_ids)


def step_info(so: Any) -> StepInfo:
    """SchedulerOutput -> StepInfo."""
    from .connector_types import ScheduledRequest, StepInfo
    counts = so.num_scheduled_tokens
    scheduled = [ScheduledRequest(r.req_id, r.num_computed_tokens, counts[r.req_id],
                                  _group0(r.block_ids), True) for r in so.scheduled_new_reqs]
    cached = so.scheduled_cached_reqs
    resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
    flags = getattr(cached, "resumed_from_preemption", None)
    for i, req_id in enumerate(cached.req_ids):
        again = req_id in resumed or bool(flags and flags[i])
        scheduled.append(ScheduledRequest(req_id, cached.num_computed_tokens[i], counts[req_id],
                                          _group0(cached.new_block_ids[i]), again))
    return StepInfo(scheduled, sorted(so.finished_req_ids),
                    sorted(getattr(so, "preempted_req_ids", None) or ()))


def attention_layers(vllm_config: Any, layer_names: List[str]) -> Dict[str, Any]:
    """vLLM's attention layer objects by name, {} without vLLM."""
    if not HAVE_VLLM:
        return {}
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    return dict(get_layers_from_vllm_config(vllm_config, AttentionLayerBase,  # type: ignore[type-abstract]
                                            layer_names))


def attention_backends(vllm_config: Any, layer_names: List[str]) -> Dict[str, str]:
    """Each attention layer's backend name (vLLM's get_name()), {} without vLLM."""
    return {name: str(layer.get_attn_backend().get_name())
            for name, layer in attention_layers(vllm_config, layer_names).items()}


def check_cpu_layout(vllm_config: Any, backends: Dict[str, str], layout: str) -> None:
    """ValueError unless CPU_ATTN layers are named with their ISA (config_from_vllm's), and
    the ISA vLLM set on each layer (if it has yet) is that one."""
    cpu = [name for name, backend in backends.items() if backend == "CPU_ATTN"]
    if not cpu or not HAVE_VLLM:  # without vLLM (the shell's stand-ins) there is no ISA to name
        return
    from .kv_layout import CPU_ISA_TAG
    isa = layout.partition(CPU_ISA_TAG)[2].partition("+")[0]
    layers = attention_layers(vllm_config, cpu)
    for name in cpu:
        set_isa = getattr(layers.get(name), "isa", None)
        if not isa or (isinstance(set_isa, str) and set_isa != isa):
            raise ValueError("GpucacheConnector: layer %s runs vLLM's CPU attention with ISA %r, the "
                             "block layout names %r: its bytes would be named wrongly" % (name, set_isa, layout))


def _layer_forms(vllm_config: Any, layer_names: List[str],
                 backends: Dict[str, str]) -> List[Callable[[Any], PagedLayer]]:
    """How to read each layer's cache tensor. In vLLM, from its attention backend (an unknown
    one is refused at registration); without vLLM (the shell's tests), from its shape."""
    from .kv_layout import paged_layer_form
    if not HAVE_VLLM and not backends:
        return [lambda t: cast("PagedLayer", t) for _ in layer_names]
    return [paged_layer_form(backends.get(name, "")) for name in layer_names]


class GpucacheConnector(KVConnectorBase_V1):
    """Subclasses vLLM's KVConnectorBase_V1 when vLLM is importable (the stand-in otherwise).

    Written against vLLM 0.32 (tests/test_vllm_conformance.py checks the method set and the
    signatures against the installed vLLM; test_vllm_e2e.py runs it in a real vLLM). vLLM
    builds one per role: the scheduler's and each worker's.
    """

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        check_one_kv_cache_group(kv_cache_config)
        rank = getattr(getattr(vllm_config, "parallel_config", None), "rank", 0) or 0
        config, model = config_from_vllm(vllm_config, rank)
        from .connector_scheduler import SchedulerCore
        from .connector_worker import WorkerCore
        self._scheduler = SchedulerCore(config) if _is_scheduler(role) else None
        self._worker = None if _is_scheduler(role) else WorkerCore(config, model)
        self._layer_index: Dict[str, int] = {}
        self._forms: List[Callable[[Any], PagedLayer]] = []

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: Dict[str, Any]) -> bool:
        """Always: loads and saves are layer-wise (wait_for_layer_load, save_kv_layer), which a
        full CUDA graph's replay skips; vLLM then runs piecewise graphs."""
        return True

    @property
    def requires_kv_delivery(self) -> bool:
        """False: saves are best-effort (a dropped one is a future miss) and never hold the
        request's blocks (request_finished returns False), so a preempted request need not
        have its output dropped and recomputed, which vLLM's default for kv_both would do."""
        return False

    # vLLM calls each side's methods only on that side's connector.
    def _scheduler_core(self) -> SchedulerCore:
        if self._scheduler is None:
            raise RuntimeError("GpucacheConnector: a scheduler-side method called on a worker's connector")
        return self._scheduler

    def _worker_core(self) -> WorkerCore:
        if self._worker is None:
            raise RuntimeError("GpucacheConnector: a worker-side method called on the scheduler's connector")
        return self._worker

    # ---- scheduler side ---------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Tuple[int, bool]:
        return self._scheduler_core().lookup(request_view(request), num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self._scheduler_core().on_alloc(request_view(request), _group0(blocks.get_block_ids()) or [],
                                        num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> GpucacheConnectorMetadata:
        return GpucacheConnectorMetadata(self._scheduler_core().build_meta(step_info(scheduler_output)))

    def request_finished(self, request: Any, block_ids: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        return self._scheduler_core().on_finished(request.request_id)

    # ---- worker side ------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: Dict[str, Any]) -> None:
        self._layer_index = {name: i for i, name in enumerate(kv_caches)}
        backends = attention_backends(self._vllm_config, list(kv_caches))
        self._forms = _layer_forms(self._vllm_config, list(kv_caches), backends)
        check_cpu_layout(self._vllm_config, backends, self._worker_core().namer.model.layout_abi)
        dtype = self._worker_core().config.geometry.dtype
        for name, layer in kv_caches.items():
            for t in (layer if isinstance(layer, (tuple, list)) else (layer,)):
                if t.dtype != dtype:  # the copies would convert values, not move bytes
                    raise ValueError("GpucacheConnector: KV cache %s is %s, the connector expected %s "
                                     "(--kv-cache-dtype)" % (name, t.dtype, dtype))
        # One layer per layer of the model, each of its block size, KV heads and head size, or
        # a refusal now (a drafter's layers would be saved past the staging mid-forward).
        self._worker_core().register([form(t) for form, t in zip(self._forms, kv_caches.values())],
                                     list(kv_caches))

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        # The step's plan reaches the worker core here, first thing in the step: vLLM calls
        # start_load_kv after the forward (after every save_kv_layer) when the step has no
        # synchronous load (vLLM 0.32: SchedulerOutput.has_sync_kv_loads).
        super().bind_connector_metadata(connector_metadata)
        if self._worker is not None:
            from .connector_types import StepMeta
            step = getattr(connector_metadata, "step", None)
            self._worker.bind(step if step is not None else StepMeta())

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        self._worker_core().start_load()

    def wait_for_layer_load(self, layer_name: str) -> None:
        self._worker_core().wait_for_layer(self._layer_index[layer_name])

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        i = self._layer_index[layer_name]
        self._worker_core().save_layer(i, self._forms[i](kv_layer))

    def wait_for_save(self) -> None:
        self._worker_core().wait_for_save()

    def get_finished(self, finished_req_ids: Set[str]) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        return self._worker_core().get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self) -> Set[int]:
        return self._worker_core().take_load_errors()

    def clear_connector_metadata(self) -> None:
        super().clear_connector_metadata()
        if self._worker is not None:
            self._worker.clear()

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.close()
        super().shutdown()  # type: ignore[no-untyped-call]  # vLLM 0.32's is unannotated


def connector_methods() -> Iterable[str]:
    """The KVConnectorBase_V1 methods this connector implements (the tests check them)."""
    return ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
            "request_finished", "register_kv_caches", "start_load_kv", "wait_for_layer_load",
            "save_kv_layer", "wait_for_save", "get_finished", "get_block_ids_with_load_errors",
            "shutdown")
