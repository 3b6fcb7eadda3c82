"""Checks of vLLM's configuration the connector makes when it is built (vllm_connector).

What fixes the bytes of a block besides the geometry, which the layout name must then say
(the CPU backend's ISA, a pipeline stage's layers), the load failure policy the cache relies
on, and a KV cache of one group. Each reads vLLM only when it is installed.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple


def _have_vllm() -> bool:
    from . import vllm_connector  # imported by now: it is the only caller
    return vllm_connector.HAVE_VLLM


def pp_layer_range(model_config: Any, pp_rank: int, pp_size: int) -> Optional[Tuple[int, int]]:
    """The layers [start, end) pipeline stage pp_rank holds: vLLM's split (get_pp_indices, which
    VLLM_PP_LAYER_PARTITION changes). None with one stage, or without vLLM (no split to read)."""
    if pp_size == 1 or not _have_vllm():
        return None
    from vllm.distributed.utils import get_pp_indices
    start, end = get_pp_indices(model_config.get_total_num_hidden_layers(), pp_rank, pp_size)
    return int(start), int(end)


def cpu_attention_isa(vllm_config: Any) -> Optional[str]:
    """The instruction set vLLM's CPU backend (CPU_ATTN) picks for this engine on this host
    ("amx", "vec", "vec16", "neon", ...), None off vLLM's CPU platform or without vLLM.

    CPU_ATTN arranges the paged cache per ISA (AMX packs it for its tiles), so the bytes the
    connector copies mean something else under another ISA: the layout name must say which.
    The scheduler and the workers run on one host, so they compute the same one.
    """
    if not _have_vllm():
        return None
    from vllm.platforms import current_platform
    if not current_platform.is_cpu():
        return None
    try:
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
    except ImportError as e:  # a vLLM whose CPU backend moved: its layout cannot be named
        raise ValueError("GpucacheConnector: cannot tell which KV layout vLLM's CPU attention "
                         "backend uses (no cpu_attn._get_attn_isa): %s" % e) from e
    mc, cc = vllm_config.model_config, vllm_config.cache_config
    return str(_get_attn_isa(mc.dtype, cc.block_size, mc.get_head_size(), str(cc.cache_dtype)))


def check_load_failure_policy(kv_transfer_config: Any) -> None:
    """ValueError unless vLLM recomputes the blocks a load fails on. vLLM 0.32's default is
    "fail", which fails the request outright on any cache error (a checksum EIO, a block
    evicted between the scheduler's stat and the load, a daemon restart); the cache promises
    that any such error only costs a recompute. A vLLM without the option always recomputes."""
    policy = getattr(kv_transfer_config, "kv_load_failure_policy", "recompute")
    if policy != "recompute":
        raise ValueError("GpucacheConnector: kv_transfer_config \"kv_load_failure_policy\" is %r (vLLM's "
                         "default is \"fail\"): a failed block load would fail the request. Add "
                         "\"kv_load_failure_policy\": \"recompute\" to --kv-transfer-config" % (policy,))


def check_one_kv_cache_group(kv_cache_config: Any) -> None:
    """ValueError unless vLLM's KVCacheConfig (when given) has at most one KV cache group.

    vLLM 0.32 refuses a connector without SupportsHMA when the hybrid KV cache manager is on,
    but some layouts keep several groups with it off (hidden-state caches, HiSparse): each
    group has block ids of its own, and vllm_connector._group0 would apply group 0's to every layer (the
    other groups' KV saved and loaded at the wrong blocks)."""
    groups = getattr(kv_cache_config, "kv_cache_groups", None)
    if groups is not None and len(groups) > 1:
        raise ValueError("GpucacheConnector: the KV cache has %d KV cache groups (a hybrid or "
                         "sliding-window layout, or extra caches); the connector handles one: run "
                         "with --disable-hybrid-kv-cache-manager and attention layers of one kind"
                         % len(groups))
