#include "store/identity.h"

#include <optional>

#include <bit>
#include <cstdio>

#include "store/codec.h"

namespace gpucache {
namespace {

constexpr std::string_view kLogicalMagic = "GPCL";
constexpr std::string_view kPhysicalMagic = "GPCK";
constexpr std::string_view kNamespaceMagic = "GPCN";
constexpr std::string_view kBlockMagic = "GPCE";

// Printable ASCII without space: keeps the rendered text unambiguous and the names safe to
// show in a terminal or a log line.
bool IsNameChar(char c) { return c > 0x20 && c < 0x7f; }

bool IsValidName(std::string_view s, bool may_be_empty) {
  if (s.empty()) return may_be_empty;
  if (s.size() > kMaxNameLength) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

bool IsValidHash(const Bytes& h) {
  return h.size() >= kMinHashLength && h.size() <= kMaxHashLength;
}

void WriteLogicalFields(ByteWriter& w, const CacheIdentity& id) {
  w.Str(id.tenant);
  w.Str(id.trust_domain);
  w.Str(id.model_revision);
  w.Str(id.model_config_digest);
  w.Str(id.tokenizer_revision);
  w.Str(id.adapter);
}

void WriteMultimodal(ByteWriter& w, const std::optional<Multimodal>& mm) {
  w.U8(mm ? 1 : 0);
  if (mm) {
    w.Str(mm->processor);
    w.Blob16(mm->input_digest);
  }
}

void WriteChain(ByteWriter& w, const std::vector<Bytes>& chain) {
  w.U16(static_cast<uint16_t>(chain.size()));
  for (const Bytes& h : chain) w.Blob16(h);
}

void WriteShardAndRope(ByteWriter& w, const CacheIdentity& id) {
  w.U32(id.tp_rank);
  w.U32(id.tp_size);
  w.U32(id.pp_rank);
  w.U32(id.pp_size);
  w.Str(id.position_encoding);
  w.U64(id.rope_theta_bits);
  w.Str(id.rope_scaling);
  w.U64(id.rope_factor_bits);
  w.U32(id.rope_original_max_positions);
}

void Header(ByteWriter& w, std::string_view magic) {
  w.Raw(magic);
  w.U16(kIdentityVersion);
}

bool ReadHeader(ByteReader& r, std::string_view magic) {
  r.Expect(magic);
  return r.U16() == kIdentityVersion && r.ok();
}

bool DecodeLogical(std::span<const uint8_t> bytes, CacheIdentity& id) {
  ByteReader r(bytes);
  if (!ReadHeader(r, kLogicalMagic)) return false;
  id.tenant = r.Str();
  id.trust_domain = r.Str();
  id.model_revision = r.Str();
  id.model_config_digest = r.Str();
  id.tokenizer_revision = r.Str();
  id.adapter = r.Str();
  uint16_t n = r.U16();
  if (n > kMaxChainLength) return false;
  id.chain.clear();
  for (uint16_t i = 0; i < n && r.ok(); ++i) id.chain.push_back(r.Blob16());
  uint8_t has_mm = r.U8();
  if (has_mm > 1) return false;
  if (has_mm == 1) {
    Multimodal mm;
    mm.processor = r.Str();
    mm.input_digest = r.Blob16();
    id.multimodal = std::move(mm);
  }
  return r.ok() && r.AtEnd();
}

std::string Double(uint64_t bits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", std::bit_cast<double>(bits));
  return buf;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

}  // namespace

bool IsValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTenantLength) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name[0])) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_') return false;
  }
  return true;
}

std::string ValidationError(const CacheIdentity& id) {
  if (!IsValidTenantName(id.tenant)) return "tenant: 1-64 of [a-z0-9_-], starting alphanumeric";
  struct Named { const char* field; const std::string* value; bool may_be_empty; };
  const Named names[] = {
      {"trust_domain", &id.trust_domain, false},
      {"model_revision", &id.model_revision, false},
      {"model_config_digest", &id.model_config_digest, false},
      {"tokenizer_revision", &id.tokenizer_revision, false},
      {"adapter", &id.adapter, true},
      {"kv_dtype", &id.kv_dtype, false},
      {"quant_format", &id.quant_format, false},
      {"layout_abi", &id.layout_abi, false},
      {"position_encoding", &id.position_encoding, false},
      {"rope_scaling", &id.rope_scaling, false},
  };
  for (const Named& n : names) {
    if (!IsValidName(*n.value, n.may_be_empty)) {
      return std::string(n.field) + ": " + (n.may_be_empty ? "0" : "1") +
             "-256 printable ASCII characters, no spaces";
    }
  }
  if (id.chain.empty() || id.chain.size() > kMaxChainLength) return "chain: 1-128 hashes";
  for (const Bytes& h : id.chain) {
    if (!IsValidHash(h)) return "chain: each hash is 8-64 bytes";
  }
  if (id.multimodal) {
    if (!IsValidName(id.multimodal->processor, false)) return "multimodal.processor: invalid";
    if (!IsValidHash(id.multimodal->input_digest)) return "multimodal.input_digest: 8-64 bytes";
  }
  if (id.tp_size == 0 || id.tp_size > kMaxParallelSize || id.tp_rank >= id.tp_size) {
    return "tp_rank/tp_size: need rank < size <= 65536";
  }
  if (id.pp_size == 0 || id.pp_size > kMaxParallelSize || id.pp_rank >= id.pp_size) {
    return "pp_rank/pp_size: need rank < size <= 65536";
  }
  if (id.block_capacity == 0 || id.block_capacity > kMaxBlockTokens) {
    return "block_capacity: 1-1048576 tokens";
  }
  if (id.valid_length == 0 || id.valid_length > id.block_capacity) {
    return "valid_length: 1..block_capacity";
  }
  return {};
}

StatusCode Validate(const CacheIdentity& id) {
  return ValidationError(id).empty() ? StatusCode::kOk : StatusCode::kInvalidArgument;
}

Bytes EncodeLogicalKey(const CacheIdentity& id) {
  ByteWriter w;
  Header(w, kLogicalMagic);
  WriteLogicalFields(w, id);
  WriteChain(w, id.chain);
  WriteMultimodal(w, id.multimodal);
  return w.Take();
}

Bytes EncodePhysicalKey(const CacheIdentity& id) {
  Bytes logical = EncodeLogicalKey(id);
  ByteWriter w;
  Header(w, kPhysicalMagic);
  w.U32(static_cast<uint32_t>(logical.size()));
  w.Raw(logical);
  w.Str(id.kv_dtype);
  w.Str(id.quant_format);
  w.Str(id.layout_abi);
  WriteShardAndRope(w, id);
  w.U32(id.block_capacity);
  w.U32(id.valid_length);
  return w.Take();
}

namespace {

// GPCK's structure (magic, version, lengths, nothing trailing), without the field rules.
std::optional<CacheIdentity> DecodeStructure(std::span<const uint8_t> bytes) {
  ByteReader r(bytes);
  if (!ReadHeader(r, kPhysicalMagic)) return std::nullopt;
  CacheIdentity id;
  auto logical = r.Raw(r.U32());
  if (!r.ok() || !DecodeLogical(logical, id)) return std::nullopt;
  id.kv_dtype = r.Str();
  id.quant_format = r.Str();
  id.layout_abi = r.Str();
  id.tp_rank = r.U32();
  id.tp_size = r.U32();
  id.pp_rank = r.U32();
  id.pp_size = r.U32();
  id.position_encoding = r.Str();
  id.rope_theta_bits = r.U64();
  id.rope_scaling = r.Str();
  id.rope_factor_bits = r.U64();
  id.rope_original_max_positions = r.U32();
  id.block_capacity = r.U32();
  id.valid_length = r.U32();
  if (!r.ok() || !r.AtEnd()) return std::nullopt;
  return id;
}

}  // namespace

Result<CacheIdentity> DecodePhysicalKey(std::span<const uint8_t> bytes) {
  std::optional<CacheIdentity> id = DecodeStructure(bytes);
  if (!id || Validate(*id) != StatusCode::kOk) return StatusCode::kInvalidArgument;
  return std::move(*id);
}

std::string DescribeIdentityError(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return "no identity (user.gpucache.identity was never set)";
  ByteReader r(bytes);
  if (!ReadHeader(r, kPhysicalMagic)) return "not a GPCK identity (wrong magic or version)";
  std::optional<CacheIdentity> id = DecodeStructure(bytes);
  if (!id) return "malformed GPCK encoding (a length past the end, or trailing bytes)";
  return ValidationError(*id);
}

Bytes EncodeNamespaceFields(const CacheIdentity& id) {
  ByteWriter w;
  Header(w, kNamespaceMagic);
  WriteLogicalFields(w, id);
  w.Str(id.kv_dtype);
  w.Str(id.quant_format);
  w.Str(id.layout_abi);
  WriteShardAndRope(w, id);
  w.U32(id.block_capacity);
  return w.Take();
}

Bytes EncodeBlockFields(const CacheIdentity& id) {
  ByteWriter w;
  Header(w, kBlockMagic);
  WriteChain(w, id.chain);
  w.U32(id.valid_length);
  WriteMultimodal(w, id.multimodal);
  return w.Take();
}

std::string RenderIdentity(const CacheIdentity& id) {
  std::string chain = std::to_string(id.chain.size()) + ":";
  for (size_t i = 0; i < id.chain.size(); ++i) {
    chain += (i ? "," : "") + HexEncode(id.chain[i]);
  }
  std::string mm = "-";
  if (id.multimodal) mm = id.multimodal->processor + ":" + HexEncode(id.multimodal->input_digest);
  return "v1 tenant=" + id.tenant + " trust=" + id.trust_domain + " model=" + id.model_revision +
         " config=" + id.model_config_digest + " tokenizer=" + id.tokenizer_revision +
         " adapter=" + OrDash(id.adapter) + " dtype=" + id.kv_dtype + " quant=" + id.quant_format +
         " layout=" + id.layout_abi + " tp=" + std::to_string(id.tp_rank) + "/" +
         std::to_string(id.tp_size) + " pp=" + std::to_string(id.pp_rank) + "/" +
         std::to_string(id.pp_size) + " pos=" + id.position_encoding +
         " rope_theta=" + Double(id.rope_theta_bits) + " rope_scaling=" + id.rope_scaling +
         " rope_factor=" + Double(id.rope_factor_bits) +
         " rope_orig_max=" + std::to_string(id.rope_original_max_positions) +
         " capacity=" + std::to_string(id.block_capacity) +
         " valid=" + std::to_string(id.valid_length) + " chain=" + chain + " mm=" + mm;
}

std::string HexEncode(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::optional<Bytes> HexDecode(std::string_view hex) {
  if (hex.size() % 2) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Bytes out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace gpucache
