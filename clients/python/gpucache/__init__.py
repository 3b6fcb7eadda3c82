"""gpucache: the pure-Python client of the gpucache KV-block filesystem.

CacheIdentity names a block completely (docs/identity-encoding.md); its path under the mount
is a pure function of it, so engines compute paths without asking the daemon. MountClient
commits, reads, probes and looks up blocks through a mounted gpucachefs.

Failure policy for engines
--------------------------
The cache is only ever an optimisation. Any error on the read side -- a miss (ENOENT: a block
still being written is one too), EIO (a checksum failure or a block being dropped), ENOTCONN
(the daemon is gone), EACCES, an identity mismatch, a short or unparsable reply --
means: recompute the KV for that block and everything after it. Never use bytes from a
failed or partial read, and never retry in a loop on the hot path. On the write side a failed
commit (EEXIST included: someone else has, or is writing, the block) is simply dropped.

The client (this module, gpucache.client) requires only the standard library and the `xxhash`
module (Debian: python3-xxhash); `pip install` also brings cbor2 and numpy, for the connector.

The engine connector (vLLM V1's KV connector and its engine-neutral core) lives in the
submodules vllm_connector, connector_scheduler and connector_worker; they also need torch,
numpy and cbor2 and are not imported here (docs/engine-integration.md). gpucache.GpucacheConnector
is gpucache.vllm_connector.GpucacheConnector, imported on first access (so `import gpucache`
needs neither torch nor vLLM).
"""

from typing import TYPE_CHECKING, Any

from .client import IDENTITY_XATTR, MountClient
from .identity import (
    CacheIdentity,
    Multimodal,
    bits_float,
    decode_physical_key,
    float_bits,
    is_valid_tenant_name,
)

if TYPE_CHECKING:
    from .vllm_connector import GpucacheConnector as GpucacheConnector

# The daemon's version: ctest python_version keeps it equal to the top-level CMakeLists.txt's
# project VERSION; pyproject.toml reads it from here.
__version__ = "0.1.0"

# GpucacheConnector is left out of __all__: `from gpucache import *` should not import torch.
__all__ = [
    "CacheIdentity",
    "IDENTITY_XATTR",
    "MountClient",
    "Multimodal",
    "bits_float",
    "decode_physical_key",
    "float_bits",
    "is_valid_tenant_name",
]


def __getattr__(name: str) -> Any:
    """GpucacheConnector on first access: the connector imports torch (and vLLM if present)."""
    if name == "GpucacheConnector":
        from .vllm_connector import GpucacheConnector
        return GpucacheConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
