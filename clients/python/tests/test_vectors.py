"""The Python identity code against the shared vectors (tests/vectors/identity.json).

The C++ store checks the same file (tests/store/vectors_test.cc), so passing here means both
implementations compute the same bytes and the same paths.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

from gpucache import CacheIdentity, Multimodal, decode_physical_key

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "..", "..", "..", "tests", "vectors", "identity.json")


def load_vectors():
    with open(VECTORS) as f:
        return json.load(f)


class VectorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cases = load_vectors()

    def test_there_are_vectors(self):
        self.assertGreaterEqual(len(self.cases), 4)
        self.assertTrue(any("multimodal" in c["identity"] for c in self.cases))

    def test_encodings_and_paths(self):
        for c in self.cases:
            with self.subTest(c["name"]):
                ident = CacheIdentity.from_json(c["identity"])
                gpck = ident.encode_physical_key()
                self.assertEqual(ident.encode_logical_key().hex(), c["gpcl_hex"])
                self.assertEqual(gpck.hex(), c["gpck_hex"])
                self.assertEqual(c["xattr_hex"], c["gpck_hex"])  # the xattr is the GPCK
                self.assertEqual(ident.relative_path(), c["path"])
                tenant, ns, block = c["path"].split("/")
                self.assertEqual((ident.tenant, ident.namespace_name(), ident.block_name()),
                                 (tenant, ns, block))
                self.assertEqual(decode_physical_key(gpck), ident)

    def test_json_round_trip(self):
        for c in self.cases:
            with self.subTest(c["name"]):
                ident = CacheIdentity.from_json(c["identity"])
                # to_json writes what the vectors (made by the C++ IdentityToJson) hold.
                self.assertEqual(ident.to_json(), c["identity"])
                self.assertEqual(CacheIdentity.from_json(ident.to_json()), ident)
                self.assertEqual(CacheIdentity.from_json(json.loads(json.dumps(ident.to_json()))),
                                 ident)

    def test_rope_as_floats(self):
        c = self.cases[0]
        want = CacheIdentity.from_json(c["identity"])
        fields = dict(c["identity"])
        del fields["rope_theta_bits"], fields["rope_factor_bits"]
        fields.update(rope_theta=500000.0, rope_factor=8)  # an int is a number too
        self.assertEqual(CacheIdentity.from_json(fields), want)
        built = CacheIdentity.create(
            rope_theta=want.rope_theta, rope_factor=want.rope_factor,
            **{k: v for k, v in vars(want).items()
               if k not in ("rope_theta_bits", "rope_factor_bits")})
        self.assertEqual(built, want)
        self.assertEqual(built.rope_theta, 500000.0)
        self.assertEqual(built.relative_path(), c["path"])


class DecoderTest(unittest.TestCase):
    def setUp(self):
        # The multimodal vector exercises every optional part of the encoding.
        case = next(c for c in load_vectors() if "multimodal" in c["identity"])
        self.gpck = bytes.fromhex(case["gpck_hex"])
        self.ident = CacheIdentity.from_json(case["identity"])
        self.assertIsInstance(self.ident.multimodal, Multimodal)

    def test_every_truncation_is_refused(self):
        for n in range(len(self.gpck)):
            with self.subTest(length=n):
                with self.assertRaises(ValueError):
                    decode_physical_key(self.gpck[:n])

    def test_trailing_byte_is_refused(self):
        with self.assertRaises(ValueError):
            decode_physical_key(self.gpck + b"\x00")

    def test_trailing_byte_inside_logical_key_is_refused(self):
        logical_len = struct.unpack_from("<I", self.gpck, 6)[0]
        end = 10 + logical_len
        bad = self.gpck[:6] + struct.pack("<I", logical_len + 1) + self.gpck[10:end] + b"\x00" \
            + self.gpck[end:]
        with self.assertRaises(ValueError):
            decode_physical_key(bad)

    def test_wrong_magic_or_version_is_refused(self):
        for bad in (b"GPCX" + self.gpck[4:],
                    self.gpck[:4] + b"\x02\x00" + self.gpck[6:],
                    self.gpck[:10] + b"GPCX" + self.gpck[14:]):
            with self.assertRaises(ValueError):
                decode_physical_key(bad)

    def test_invalid_decoded_identity_is_refused(self):
        # Same bytes as a valid key but valid_length (the last u32) is 0.
        with self.assertRaises(ValueError):
            decode_physical_key(self.gpck[:-4] + b"\x00\x00\x00\x00")


class ValidationTest(unittest.TestCase):
    def setUp(self):
        self.ident = CacheIdentity.from_json(load_vectors()[0]["identity"])

    def assertInvalid(self, field, **changes):
        bad = self.ident.replace(**changes)
        with self.assertRaises(ValueError) as cm:
            bad.validate()
        self.assertTrue(str(cm.exception).startswith(field), str(cm.exception))
        with self.assertRaises(ValueError):  # and encoders refuse it too
            bad.encode_physical_key()
        with self.assertRaises(ValueError):  # and from_json, naming the field
            CacheIdentity.from_json(bad.to_json())

    def test_vector_is_valid(self):
        self.ident.validate()

    def test_valid_length(self):
        self.assertInvalid("valid_length", valid_length=0)
        self.assertInvalid("valid_length", valid_length=self.ident.block_capacity + 1)
        self.ident.replace(valid_length=self.ident.block_capacity).validate()
        self.ident.replace(valid_length=1).validate()

    def test_chain(self):
        self.assertInvalid("chain", chain=[])
        self.assertInvalid("chain", chain=[b"\x00" * 7])
        self.assertInvalid("chain", chain=[b"\x00" * 65])
        self.assertInvalid("chain", chain=[b"\x00" * 8] * 129)
        self.ident.replace(chain=[b"\x00" * 8] * 128).validate()

    def test_tenant(self):
        self.assertInvalid("tenant", tenant="Acme")
        self.assertInvalid("tenant", tenant="")
        self.assertInvalid("tenant", tenant="-acme")
        self.assertInvalid("tenant", tenant="a" * 65)
        self.ident.replace(tenant="a" * 64).validate()
        self.ident.replace(tenant="0_a-b").validate()

    def test_names(self):
        self.assertInvalid("model_revision", model_revision="meta llama")
        self.assertInvalid("kv_dtype", kv_dtype="")
        self.assertInvalid("rope_scaling", rope_scaling="x" * 257)
        self.assertInvalid("layout_abi", layout_abi="caf\u00e9")
        self.assertInvalid("adapter", adapter="lora\tx")
        self.ident.replace(adapter="").validate()

    def test_shards_and_sizes(self):
        self.assertInvalid("tp_rank", tp_rank=2)  # rank == size
        self.assertInvalid("tp_rank", tp_size=0)
        self.assertInvalid("pp_rank", pp_size=65537, pp_rank=0)
        self.assertInvalid("block_capacity", block_capacity=0)
        self.assertInvalid("block_capacity", block_capacity=(1 << 20) + 1, valid_length=1)

    def test_multimodal(self):
        self.assertInvalid("multimodal.processor", multimodal=Multimodal("", b"\x01" * 8))
        self.assertInvalid("multimodal.input_digest", multimodal=Multimodal("p", b"\x01" * 7))

    def test_from_json_errors_name_the_key(self):
        base = self.ident.to_json()
        for key, value in (("chain", ["00 01 02 03 04 05 06 07"]),
                           ("rope_theta_bits", "0x1234"),
                           ("tp_size", -1),
                           ("tp_size", True),
                           ("tenant", 5)):
            with self.subTest(key=key, value=value):
                with self.assertRaisesRegex(ValueError, key):
                    CacheIdentity.from_json(dict(base, **{key: value}))
        missing = dict(base)
        del missing["kv_dtype"]
        with self.assertRaisesRegex(ValueError, "kv_dtype"):
            CacheIdentity.from_json(missing)

    # Regression: from_json ignored keys it did not know, unlike the C++ client's identity
    # files: a misspelt key ("tp_rnak") left its field at the default and named another
    # engine's blocks, which a load would then have read.
    def test_from_json_refuses_unknown_keys(self):
        base = self.ident.to_json()
        with self.assertRaisesRegex(ValueError, "tp_rnak"):
            CacheIdentity.from_json(dict(base, tp_rnak=1))
        mm = dict(base, multimodal={"processor": "p", "input_digest": "01" * 8, "extra": 1})
        with self.assertRaisesRegex(ValueError, "multimodal.extra"):
            CacheIdentity.from_json(mm)

    # Regression (review, 2026-12-06): a NaN RoPE value gave C++ and Python different paths
    # (toml++ drops a NaN's sign, tomllib keeps it): refused, its bits must be given.
    def test_from_json_refuses_nan_floats(self):
        base = self.ident.to_json()
        del base["rope_theta_bits"]
        for nan in (float("nan"), -float("nan")):
            with self.assertRaisesRegex(ValueError, "rope_theta.*NaN"):
                CacheIdentity.from_json(dict(base, rope_theta=nan))


class DependencyTest(unittest.TestCase):
    # Regression (review, 2026-12-06): pyproject.toml gave xxhash no lower bound, and an xxhash
    # before 2.0 (no XXH3) imported fine and failed at the first path (AttributeError). The
    # bound cannot be declared (Debian's python3-xxhash says 0.0.0): the import refuses it.
    def test_an_xxhash_without_xxh3_is_refused_at_import(self):
        package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        with tempfile.TemporaryDirectory() as fake:
            with open(os.path.join(fake, "xxhash.py"), "w") as f:
                f.write("VERSION = '1.4.4'\ndef xxh64_hexdigest(b): return '0'\n")
            r = subprocess.run([sys.executable, "-c", "import gpucache"], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join([fake, package])})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError: gpucache needs xxhash 2.0 or later (XXH3-128); this xxhash is 1.4.4", r.stderr)
        with open(os.path.join(package, "pyproject.toml")) as f:
            self.assertIn("xxhash needs 2.0", f.read())


if __name__ == "__main__":
    unittest.main()
