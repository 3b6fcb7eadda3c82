"""CacheIdentity v1: fields, validation, the GPCL/GPCK encodings and the block path.

This is a byte-for-byte port of store/identity.cc and store/layout.cc; the rules are written
down in docs/identity-encoding.md and pinned by tests/vectors/identity.json. Any divergence
from the C++ code means two engines compute different paths for the same block, so change
nothing here without regenerating the vectors.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Optional

import xxhash

# Paths are XXH3-128 digests, which xxhash has from 2.0 on. pyproject.toml cannot say
# "xxhash>=2.0": Debian 12's python3-xxhash declares its version as 0.0.0, and the bound
# would refuse it. So an older xxhash is refused here, by what it lacks.
if not hasattr(xxhash, "xxh3_128_hexdigest"):
    raise ImportError("gpucache needs xxhash 2.0 or later (XXH3-128); this xxhash is %s"
                      % getattr(xxhash, "VERSION", "older"))

VERSION = 1

# Bounds (store/identity.h). They keep an encoded identity a few KiB, far below the 64 KiB
# limit of one xattr value.
MAX_TENANT_LENGTH = 64
MAX_NAME_LENGTH = 256
MIN_HASH_LENGTH = 8
MAX_HASH_LENGTH = 64
MAX_CHAIN_LENGTH = 128
MAX_BLOCK_TOKENS = 1 << 20
MAX_PARALLEL_SIZE = 1 << 16

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF

_TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_SLUG_BAD_RE = re.compile(rb"[^A-Za-z0-9._-]")

# Name fields in the order the C++ ValidationError checks them (so both report the same field
# first), with whether the field may be empty.
_NAME_FIELDS = (
    ("trust_domain", False),
    ("model_revision", False),
    ("model_config_digest", False),
    ("tokenizer_revision", False),
    ("adapter", True),
    ("kv_dtype", False),
    ("quant_format", False),
    ("layout_abi", False),
    ("position_encoding", False),
    ("rope_scaling", False),
)
_U32_FIELDS = (
    "tp_rank", "tp_size", "pp_rank", "pp_size",
    "rope_original_max_positions", "block_capacity", "valid_length",
)


def float_bits(x: float) -> int:
    """IEEE-754 binary64 bits of x, as the identity stores RoPE parameters."""
    bits: int = struct.unpack("<Q", struct.pack("<d", float(x)))[0]
    return bits


def bits_float(bits: int) -> float:
    x: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return x


def _is_int(v: Any) -> bool:
    # bool is an int subclass; True is not a tensor-parallel size.
    return isinstance(v, int) and not isinstance(v, bool)


def _is_name(s: Any, may_be_empty: bool) -> bool:
    if not isinstance(s, str):
        return False
    if not s:
        return may_be_empty
    return len(s) <= MAX_NAME_LENGTH and all("\x21" <= c <= "\x7e" for c in s)


def _is_hash(h: Any) -> bool:
    return isinstance(h, (bytes, bytearray)) and MIN_HASH_LENGTH <= len(h) <= MAX_HASH_LENGTH


def is_valid_tenant_name(name: Any) -> bool:
    return (isinstance(name, str) and 0 < len(name) <= MAX_TENANT_LENGTH
            and _TENANT_RE.fullmatch(name) is not None)


@dataclass
class Multimodal:
    processor: str       # processor identity, e.g. "qwen2-vl-processor@rev"
    input_digest: bytes  # digest of the media inputs the block's tokens depend on


@dataclass(kw_only=True)
class CacheIdentity:
    """Everything that determines the bytes of one KV block (store/identity.h).

    Defaults are those of the C++ struct and identity files: no adapter, no multimodal input,
    tp/pp 0 of 1, rope_original_max_positions 0. block_capacity and valid_length have no
    usable default. Use create() to give RoPE parameters as floats.
    """

    # Logical fields (GPCL).
    tenant: str
    trust_domain: str
    model_revision: str
    model_config_digest: str
    tokenizer_revision: str
    adapter: str = ""
    chain: list[bytes] = field(default_factory=list)
    multimodal: Optional[Multimodal] = None
    # Physical fields (GPCK adds these).
    kv_dtype: str
    quant_format: str
    layout_abi: str
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    position_encoding: str
    rope_theta_bits: int
    rope_scaling: str
    rope_factor_bits: int
    rope_original_max_positions: int = 0
    block_capacity: int
    valid_length: int

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def create(cls, *, rope_theta: Optional[float] = None, rope_factor: Optional[float] = None,
               **fields: Any) -> "CacheIdentity":
        """Like the constructor, but rope_theta / rope_factor may be given as floats."""
        if rope_theta is not None:
            fields["rope_theta_bits"] = float_bits(rope_theta)
        if rope_factor is not None:
            fields["rope_factor_bits"] = float_bits(rope_factor)
        return cls(**fields)

    @property
    def rope_theta(self) -> float:
        return bits_float(self.rope_theta_bits)

    @property
    def rope_factor(self) -> float:
        return bits_float(self.rope_factor_bits)

    def replace(self, **changes: Any) -> "CacheIdentity":
        """A copy with some fields changed (dataclasses.replace)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "CacheIdentity":
        """Parses the JSON/TOML form used by identity files and the test vectors.

        Mirrors clients/cpp/identity_file.cc: same keys, same defaults, unknown keys refused
        (a misspelt key would leave its field at the default and name another engine's
        blocks); the result is validated. Raises ValueError naming the key at fault.
        """
        return _from_mapping(obj)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (as IdentityToJson in C++): hex strings, RoPE bits as "0x..."."""
        out: dict[str, Any] = {
            "tenant": self.tenant,
            "trust_domain": self.trust_domain,
            "model_revision": self.model_revision,
            "model_config_digest": self.model_config_digest,
            "tokenizer_revision": self.tokenizer_revision,
            "adapter": self.adapter,
            "chain": [bytes(h).hex() for h in self.chain],
        }
        if self.multimodal is not None:
            out["multimodal"] = {"processor": self.multimodal.processor,
                                 "input_digest": bytes(self.multimodal.input_digest).hex()}
        out.update({
            "kv_dtype": self.kv_dtype,
            "quant_format": self.quant_format,
            "layout_abi": self.layout_abi,
            "tp_rank": self.tp_rank,
            "tp_size": self.tp_size,
            "pp_rank": self.pp_rank,
            "pp_size": self.pp_size,
            "position_encoding": self.position_encoding,
            "rope_theta_bits": "0x%016x" % self.rope_theta_bits,
            "rope_scaling": self.rope_scaling,
            "rope_factor_bits": "0x%016x" % self.rope_factor_bits,
            "rope_original_max_positions": self.rope_original_max_positions,
            "block_capacity": self.block_capacity,
            "valid_length": self.valid_length,
        })
        return out

    # ---- validation ---------------------------------------------------------------------

    def validate(self) -> None:
        """Raises ValueError("<field>: <rule>") unless every rule of the spec holds.

        Same checks and order as ValidationError() in store/identity.cc, plus the type and
        range checks that C++ gets from its types for free.
        """
        if not is_valid_tenant_name(self.tenant):
            raise ValueError("tenant: 1-64 of [a-z0-9_-], starting alphanumeric")
        for name, may_be_empty in _NAME_FIELDS:
            if not _is_name(getattr(self, name), may_be_empty):
                raise ValueError("%s: %d-256 printable ASCII characters, no spaces"
                                 % (name, 0 if may_be_empty else 1))
        if not isinstance(self.chain, (list, tuple)) or not 1 <= len(self.chain) <= MAX_CHAIN_LENGTH:
            raise ValueError("chain: 1-128 hashes")
        if not all(_is_hash(h) for h in self.chain):
            raise ValueError("chain: each hash is 8-64 bytes")
        if self.multimodal is not None:
            if not isinstance(self.multimodal, Multimodal):
                raise ValueError("multimodal: must be a Multimodal or None")
            if not _is_name(self.multimodal.processor, False):
                raise ValueError("multimodal.processor: invalid")
            if not _is_hash(self.multimodal.input_digest):
                raise ValueError("multimodal.input_digest: 8-64 bytes")
        for name in _U32_FIELDS:
            v = getattr(self, name)
            if not _is_int(v) or not 0 <= v <= _U32_MAX:
                raise ValueError("%s: must be an integer 0..4294967295" % name)
        for name in ("rope_theta_bits", "rope_factor_bits"):
            v = getattr(self, name)
            if not _is_int(v) or not 0 <= v <= _U64_MAX:
                raise ValueError("%s: must be an integer 0..2**64-1 (binary64 bits)" % name)
        if not 0 < self.tp_size <= MAX_PARALLEL_SIZE or self.tp_rank >= self.tp_size:
            raise ValueError("tp_rank/tp_size: need rank < size <= 65536")
        if not 0 < self.pp_size <= MAX_PARALLEL_SIZE or self.pp_rank >= self.pp_size:
            raise ValueError("pp_rank/pp_size: need rank < size <= 65536")
        if not 0 < self.block_capacity <= MAX_BLOCK_TOKENS:
            raise ValueError("block_capacity: 1-1048576 tokens")
        if not 0 < self.valid_length <= self.block_capacity:
            raise ValueError("valid_length: 1..block_capacity")

    # ---- encodings ----------------------------------------------------------------------
    # Each public encoder validates first: the C++ encoders REQUIRE a valid identity, and an
    # invalid one (say a 70 000-byte name) cannot even be length-prefixed correctly.

    def encode_logical_key(self) -> bytes:
        """GPCL: tenant, trust domain, model, tokenizer, adapter, chain, multimodal."""
        self.validate()
        return self._logical()

    def encode_physical_key(self) -> bytes:
        """GPCK: GPCL plus every byte-affecting field. Also the canonical identity, i.e. the
        value of the user.gpucache.identity xattr."""
        self.validate()
        w = _Writer(b"GPCK")
        logical = self._logical()
        w.u32(len(logical))
        w.raw(logical)
        self._write_physical_names(w)
        self._write_shard_and_rope(w)
        w.u32(self.block_capacity)
        w.u32(self.valid_length)
        return w.take()

    def encode_namespace_fields(self) -> bytes:
        """GPCN: the fields every block of one namespace directory shares."""
        self.validate()
        w = _Writer(b"GPCN")
        self._write_logical_names(w)
        self._write_physical_names(w)
        self._write_shard_and_rope(w)
        w.u32(self.block_capacity)
        return w.take()

    def encode_block_fields(self) -> bytes:
        """GPCE: the per-block fields (chain, valid length, multimodal)."""
        self.validate()
        w = _Writer(b"GPCE")
        self._write_chain(w)
        w.u32(self.valid_length)
        self._write_multimodal(w)
        return w.take()

    def _logical(self) -> bytes:
        w = _Writer(b"GPCL")
        self._write_logical_names(w)
        self._write_chain(w)
        self._write_multimodal(w)
        return w.take()

    def _write_logical_names(self, w: "_Writer") -> None:
        for s in (self.tenant, self.trust_domain, self.model_revision, self.model_config_digest,
                  self.tokenizer_revision, self.adapter):
            w.string(s)

    def _write_physical_names(self, w: "_Writer") -> None:
        w.string(self.kv_dtype)
        w.string(self.quant_format)
        w.string(self.layout_abi)

    def _write_chain(self, w: "_Writer") -> None:
        w.u16(len(self.chain))
        for h in self.chain:
            w.blob16(h)

    def _write_multimodal(self, w: "_Writer") -> None:
        if self.multimodal is None:
            w.u8(0)
        else:
            w.u8(1)
            w.string(self.multimodal.processor)
            w.blob16(self.multimodal.input_digest)

    def _write_shard_and_rope(self, w: "_Writer") -> None:
        for v in (self.tp_rank, self.tp_size, self.pp_rank, self.pp_size):
            w.u32(v)
        w.string(self.position_encoding)
        w.u64(self.rope_theta_bits)
        w.string(self.rope_scaling)
        w.u64(self.rope_factor_bits)
        w.u32(self.rope_original_max_positions)

    # ---- paths --------------------------------------------------------------------------

    def namespace_slug(self) -> str:
        """Cosmetic prefix of the namespace name: model.dtype.tpXofY.ppXofY."""
        self.validate()  # names are then ASCII
        model = self.model_revision.encode("ascii")
        model = model[model.rfind(b"/") + 1:]  # rfind is -1 when absent: keeps everything
        model = model.split(b"@", 1)[0]
        slug = _sanitize(model, 32) or "model"
        if slug.startswith("."):  # never a hidden name, never "." or ".."
            slug = "_" + slug[1:]
        return "%s.%s.tp%dof%d.pp%dof%d" % (slug, _sanitize(self.kv_dtype.encode("ascii"), 12),
                                            self.tp_rank, self.tp_size, self.pp_rank, self.pp_size)

    def namespace_name(self) -> str:
        return self.namespace_slug() + "-" + xxhash.xxh3_128_hexdigest(self.encode_namespace_fields())

    def block_name(self) -> str:
        return xxhash.xxh3_128_hexdigest(self.encode_block_fields())

    def relative_path(self) -> str:
        """<tenant>/<namespace>/<block>, relative to the mountpoint."""
        return "%s/%s/%s" % (self.tenant, self.namespace_name(), self.block_name())


def _sanitize(s: bytes, limit: int) -> str:
    # Cut first, then replace byte for byte, as the C++ Sanitize does.
    return _SLUG_BAD_RE.sub(b"_", s[:limit]).decode("ascii")


# ---- binary writer / strict reader ------------------------------------------------------

class _Writer:
    """Little-endian primitives; every encoding starts with magic and u16 version."""

    def __init__(self, magic: bytes):
        self._parts = [magic, struct.pack("<H", VERSION)]

    def u8(self, v: int) -> None: self._parts.append(struct.pack("<B", v))
    def u16(self, v: int) -> None: self._parts.append(struct.pack("<H", v))
    def u32(self, v: int) -> None: self._parts.append(struct.pack("<I", v))
    def u64(self, v: int) -> None: self._parts.append(struct.pack("<Q", v))
    def raw(self, b: bytes) -> None: self._parts.append(bytes(b))

    def blob16(self, b: bytes) -> None:
        self.u16(len(b))
        self.raw(b)

    def string(self, s: str) -> None:
        # Validated names are ASCII, so characters and bytes coincide.
        self.blob16(s.encode("ascii"))

    def take(self) -> bytes:
        return b"".join(self._parts)


class _Reader:
    """Reads the primitives back; any read past the end raises ValueError (input is hostile)."""

    def __init__(self, data: bytes):
        self._data = memoryview(data)
        self._pos = 0

    def raw(self, n: int) -> bytes:
        if n > len(self._data) - self._pos:
            raise ValueError("GPCK: length runs past the end")
        out = bytes(self._data[self._pos:self._pos + n])
        self._pos += n
        return out

    def _int(self, fmt: str, size: int) -> int:
        value: int = struct.unpack(fmt, self.raw(size))[0]
        return value

    def u8(self) -> int: return self._int("<B", 1)
    def u16(self) -> int: return self._int("<H", 2)
    def u32(self) -> int: return self._int("<I", 4)
    def u64(self) -> int: return self._int("<Q", 8)
    def blob16(self) -> bytes: return self.raw(self.u16())

    def string(self) -> str:
        # latin-1 maps bytes 1:1, so a non-ASCII byte survives to be refused by validate().
        return self.blob16().decode("latin-1")

    def header(self, magic: bytes) -> None:
        if self.raw(4) != magic or self.u16() != VERSION:
            raise ValueError("not a %s v%d encoding" % (magic.decode(), VERSION))

    def end(self) -> None:
        if self._pos != len(self._data):
            raise ValueError("GPCK: trailing bytes")


def decode_physical_key(data: bytes) -> CacheIdentity:
    """Strict GPCK decoder (DecodePhysicalKey in C++).

    Wrong magic or version, a length past the end, trailing bytes (after GPCL or after GPCK),
    or an identity that fails validate() all raise ValueError.
    """
    r = _Reader(data)
    r.header(b"GPCK")
    lr = _Reader(r.raw(r.u32()))
    lr.header(b"GPCL")
    names = [lr.string() for _ in range(6)]
    n = lr.u16()
    if n > MAX_CHAIN_LENGTH:  # refuse before reading: C++ does the same
        raise ValueError("chain: 1-128 hashes")
    chain = [lr.blob16() for _ in range(n)]
    has_mm = lr.u8()
    if has_mm > 1:
        raise ValueError("GPCL: multimodal flag must be 0 or 1")
    mm = Multimodal(lr.string(), lr.blob16()) if has_mm else None
    lr.end()
    kv_dtype, quant_format, layout_abi = r.string(), r.string(), r.string()
    tp_rank, tp_size, pp_rank, pp_size = r.u32(), r.u32(), r.u32(), r.u32()
    position_encoding = r.string()
    rope_theta_bits = r.u64()
    rope_scaling = r.string()
    rope_factor_bits = r.u64()
    rope_original_max_positions = r.u32()
    block_capacity = r.u32()
    valid_length = r.u32()
    r.end()
    ident = CacheIdentity(
        tenant=names[0], trust_domain=names[1], model_revision=names[2],
        model_config_digest=names[3], tokenizer_revision=names[4], adapter=names[5],
        chain=chain, multimodal=mm, kv_dtype=kv_dtype, quant_format=quant_format,
        layout_abi=layout_abi, tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank,
        pp_size=pp_size, position_encoding=position_encoding, rope_theta_bits=rope_theta_bits,
        rope_scaling=rope_scaling, rope_factor_bits=rope_factor_bits,
        rope_original_max_positions=rope_original_max_positions,
        block_capacity=block_capacity, valid_length=valid_length)
    ident.validate()
    return ident


# ---- JSON / TOML mapping ----------------------------------------------------------------

_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")


def _hex(key: str, s: Any) -> bytes:
    # Stricter than bytes.fromhex, which accepts spaces; C++ HexDecode does not.
    if not isinstance(s, str) or not _HEX_RE.fullmatch(s):
        raise ValueError("identity key '%s': not an even-length hex string" % key)
    return bytes.fromhex(s)


# The keys an identity may hold (docs/identity-encoding.md), as kIdentityKeys in C++.
_IDENTITY_KEYS = frozenset((
    "tenant", "trust_domain", "model_revision", "model_config_digest", "tokenizer_revision",
    "adapter", "chain", "multimodal", "kv_dtype", "quant_format", "layout_abi", "tp_rank",
    "tp_size", "pp_rank", "pp_size", "position_encoding", "rope_theta", "rope_theta_bits",
    "rope_scaling", "rope_factor", "rope_factor_bits", "rope_original_max_positions",
    "block_capacity", "valid_length"))
_MULTIMODAL_KEYS = frozenset(("processor", "input_digest"))


def _reject_unknown_keys(obj: dict[str, Any], known: frozenset[str], prefix: str) -> None:
    for key in obj:
        if key not in known:
            raise ValueError("identity key '%s%s': unknown key" % (prefix, key))


def _from_mapping(obj: Any) -> CacheIdentity:
    if not isinstance(obj, dict):
        raise ValueError("identity: expected a JSON object")
    _reject_unknown_keys(obj, _IDENTITY_KEYS, "")

    def s(key: str, required: bool = True, src: dict[str, Any] = obj, prefix: str = "") -> str:
        if key not in src:
            if required:
                raise ValueError("identity key '%s%s': missing" % (prefix, key))
            return ""
        if not isinstance(src[key], str):
            raise ValueError("identity key '%s%s': must be a string" % (prefix, key))
        value: str = src[key]
        return value

    def u32(key: str, default: int) -> int:
        if key not in obj:
            return default
        v = obj[key]
        if not _is_int(v) or not 0 <= v <= _U32_MAX:
            raise ValueError("identity key '%s': must be an integer 0..4294967295" % key)
        n: int = v
        return n

    def bits(key: str) -> int:
        # "<key>_bits" ("0x" + 16 hex digits) wins over a float "<key>", as in C++.
        if key + "_bits" in obj:
            v = obj[key + "_bits"]
            if not isinstance(v, str):
                raise ValueError("identity key '%s_bits': must be a string \"0x...\"" % key)
            digits = v[2:] if v.startswith("0x") else v
            if len(digits) != 16:
                raise ValueError("identity key '%s_bits': expected 0x followed by 16 hex digits"
                                 % key)
            return int.from_bytes(_hex(key + "_bits", digits), "big")
        v = obj.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("identity key '%s': missing (give a number or %s_bits)" % (key, key))
        if math.isnan(v):  # parsers disagree on a NaN's sign and payload: no single path
            raise ValueError("identity key '%s': is NaN, which has no single encoding: give %s_bits"
                             % (key, key))
        return float_bits(v)

    chain = obj.get("chain")
    if not isinstance(chain, list):
        raise ValueError("identity key 'chain': missing or not an array")
    if not all(isinstance(h, str) for h in chain):
        raise ValueError("identity key 'chain': every entry must be a hex string")

    mm = None
    mm_obj = obj.get("multimodal")
    if mm_obj is not None:
        if not isinstance(mm_obj, dict):
            raise ValueError("identity key 'multimodal': must be an object")
        _reject_unknown_keys(mm_obj, _MULTIMODAL_KEYS, "multimodal.")
        mm = Multimodal(s("processor", src=mm_obj, prefix="multimodal."),
                        _hex("multimodal.input_digest",
                             s("input_digest", src=mm_obj, prefix="multimodal.")))

    ident = CacheIdentity(
        tenant=s("tenant"),
        trust_domain=s("trust_domain"),
        model_revision=s("model_revision"),
        model_config_digest=s("model_config_digest"),
        tokenizer_revision=s("tokenizer_revision"),
        adapter=s("adapter", required=False),
        chain=[_hex("chain", h) for h in chain],
        multimodal=mm,
        kv_dtype=s("kv_dtype"),
        quant_format=s("quant_format"),
        layout_abi=s("layout_abi"),
        tp_rank=u32("tp_rank", 0),
        tp_size=u32("tp_size", 1),
        pp_rank=u32("pp_rank", 0),
        pp_size=u32("pp_size", 1),
        position_encoding=s("position_encoding"),
        rope_theta_bits=bits("rope_theta"),
        rope_scaling=s("rope_scaling"),
        rope_factor_bits=bits("rope_factor"),
        rope_original_max_positions=u32("rope_original_max_positions", 0),
        block_capacity=u32("block_capacity", 0),
        valid_length=u32("valid_length", 0),
    )
    try:
        ident.validate()
    except ValueError as e:
        raise ValueError("invalid identity: %s" % e) from None
    return ident
