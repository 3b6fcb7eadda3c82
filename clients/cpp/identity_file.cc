#include "clients/cpp/identity_file.h"

#include <bit>
#include <cmath>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <toml++/toml.h>

namespace gpucache {
namespace {

[[noreturn]] void Fail(const std::string& key, const std::string& why) {
  throw std::runtime_error("identity key '" + key + "': " + why);
}

Bytes Hex(const std::string& key, const std::string& s) {
  auto b = HexDecode(s);
  if (!b) Fail(key, "not an even-length hex string");
  return *b;
}

uint64_t BitsFromHex(const std::string& key, std::string s) {
  if (s.rfind("0x", 0) == 0) s = s.substr(2);
  if (s.size() != 16) Fail(key, "expected 0x followed by 16 hex digits");
  auto b = HexDecode(s);
  if (!b) Fail(key, "not hex");
  uint64_t v = 0;
  for (uint8_t byte : *b) v = v << 8 | byte;
  return v;
}

std::string BitsToHex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

// A source of keyed values: TOML table or JSON object, behind one interface so the field
// list is written once.
template <typename Getter>
CacheIdentity Build(Getter& g) {
  CacheIdentity id;
  id.tenant = g.Str("tenant", true);
  id.trust_domain = g.Str("trust_domain", true);
  id.model_revision = g.Str("model_revision", true);
  id.model_config_digest = g.Str("model_config_digest", true);
  id.tokenizer_revision = g.Str("tokenizer_revision", true);
  id.adapter = g.Str("adapter", false);
  for (const std::string& h : g.StrList("chain")) id.chain.push_back(Hex("chain", h));
  if (auto mm = g.Multimodal()) id.multimodal = std::move(*mm);
  id.kv_dtype = g.Str("kv_dtype", true);
  id.quant_format = g.Str("quant_format", true);
  id.layout_abi = g.Str("layout_abi", true);
  id.tp_rank = g.U32("tp_rank", 0);
  id.tp_size = g.U32("tp_size", 1);
  id.pp_rank = g.U32("pp_rank", 0);
  id.pp_size = g.U32("pp_size", 1);
  id.position_encoding = g.Str("position_encoding", true);
  id.rope_theta_bits = g.Bits("rope_theta");
  id.rope_scaling = g.Str("rope_scaling", true);
  id.rope_factor_bits = g.Bits("rope_factor");
  id.rope_original_max_positions = g.U32("rope_original_max_positions", 0);
  id.block_capacity = g.U32("block_capacity", 0);
  id.valid_length = g.U32("valid_length", 0);
  if (std::string why = ValidationError(id); !why.empty()) {
    throw std::runtime_error("invalid identity: " + why);
  }
  return id;
}

// The keys an identity file may hold (docs/identity-encoding.md), and those of its [multimodal]
// table. Anything else is refused: a misspelt key (`tp_rnak = 1`) would otherwise leave its
// field at the default and name another engine's block, which a put would then call "already
// present" and a get would serve.
const std::set<std::string, std::less<>> kIdentityKeys = {
    "tenant", "trust_domain", "model_revision", "model_config_digest", "tokenizer_revision",
    "adapter", "chain", "multimodal", "kv_dtype", "quant_format", "layout_abi", "tp_rank",
    "tp_size", "pp_rank", "pp_size", "position_encoding", "rope_theta", "rope_theta_bits",
    "rope_scaling", "rope_factor", "rope_factor_bits", "rope_original_max_positions",
    "block_capacity", "valid_length"};
const std::set<std::string, std::less<>> kMultimodalKeys = {"processor", "input_digest"};

void RejectUnknownKeys(const toml::table& t, const std::set<std::string, std::less<>>& known,
                       const std::string& prefix) {
  for (const auto& [key, node] : t) {
    (void)node;
    if (!known.contains(key.str())) Fail(prefix + std::string(key.str()), "unknown key");
  }
}

struct TomlGetter {
  const toml::table& t;
  std::string Str(const char* key, bool required) {
    auto node = t[key];
    if (!node) {
      if (required) Fail(key, "missing");
      return {};
    }
    auto v = node.value<std::string>();
    if (!v) Fail(key, "must be a string");
    return *v;
  }
  std::vector<std::string> StrList(const char* key) {
    const toml::array* a = t[key].as_array();
    if (!a) Fail(key, "missing or not an array of hex strings");
    std::vector<std::string> out;
    for (const auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v) Fail(key, "every entry must be a hex string");
      out.push_back(*v);
    }
    return out;
  }
  uint32_t U32(const char* key, uint32_t def) {
    auto node = t[key];
    if (!node) return def;
    // is_integer: value<int64_t>() would also take `true` as 1.
    auto v = node.is_integer() ? node.value<int64_t>() : std::nullopt;
    if (!v || *v < 0 || *v > UINT32_MAX) Fail(key, "must be an integer 0..4294967295");
    return static_cast<uint32_t>(*v);
  }
  uint64_t Bits(const std::string& key) {
    if (auto bits = t[key + "_bits"]) {
      if (t[key]) Fail(key, "given twice (as " + key + " and " + key + "_bits): give one");
      auto s = bits.value<std::string>();
      if (!s) Fail(key + "_bits", "must be a string \"0x...\"");
      return BitsFromHex(key + "_bits", *s);
    }
    if (!t[key]) Fail(key, "missing (give a float, or " + key + "_bits)");
    auto v = t[key].is_number() ? t[key].value<double>() : std::nullopt;
    if (!v) Fail(key, "must be a number");
    // TOML parsers do not agree on a NaN's sign and payload bits: no single path. Its bits
    // must be given exactly.
    if (std::isnan(*v)) Fail(key, "is NaN, which has no single encoding: give " + key + "_bits");
    return std::bit_cast<uint64_t>(*v);
  }
  std::optional<gpucache::Multimodal> Multimodal() {
    if (!t["multimodal"]) return std::nullopt;
    const toml::table* mm = t["multimodal"].as_table();
    if (!mm) Fail("multimodal", "must be a table ([multimodal] with processor and input_digest)");
    RejectUnknownKeys(*mm, kMultimodalKeys, "multimodal.");
    TomlGetter g{*mm};
    return gpucache::Multimodal{g.Str("processor", true),
                                Hex("multimodal.input_digest", g.Str("input_digest", true))};
  }
};

struct JsonGetter {
  const nlohmann::json& j;
  std::string Str(const char* key, bool required) {
    if (!j.contains(key)) {
      if (required) Fail(key, "missing");
      return {};
    }
    if (!j[key].is_string()) Fail(key, "must be a string");
    return j[key].get<std::string>();
  }
  std::vector<std::string> StrList(const char* key) {
    if (!j.contains(key) || !j[key].is_array()) Fail(key, "missing or not an array");
    std::vector<std::string> out;
    for (const auto& e : j[key]) {
      if (!e.is_string()) Fail(key, "every entry must be a hex string");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  uint32_t U32(const char* key, uint32_t def) {
    if (!j.contains(key)) return def;
    if (!j[key].is_number_unsigned() || j[key].get<uint64_t>() > UINT32_MAX) {
      Fail(key, "must be an integer 0..4294967295");
    }
    return j[key].get<uint32_t>();
  }
  uint64_t Bits(const std::string& key) {
    if (j.contains(key + "_bits")) {
      if (!j[key + "_bits"].is_string()) Fail(key + "_bits", "must be a string \"0x...\"");
      return BitsFromHex(key + "_bits", j[key + "_bits"].get<std::string>());
    }
    if (!j.contains(key) || !j[key].is_number()) Fail(key, "missing (give a number or _bits)");
    return std::bit_cast<uint64_t>(j[key].get<double>());
  }
  std::optional<gpucache::Multimodal> Multimodal() {
    if (!j.contains("multimodal") || j["multimodal"].is_null()) return std::nullopt;
    JsonGetter g{j["multimodal"]};
    return gpucache::Multimodal{g.Str("processor", true),
                                Hex("multimodal.input_digest", g.Str("input_digest", true))};
  }
};

}  // namespace

CacheIdentity IdentityFromTomlString(const std::string& text) {
  toml::table t;
  try {
    t = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(std::string("identity TOML: ") + std::string(e.description()));
  }
  RejectUnknownKeys(t, kIdentityKeys, "");
  TomlGetter g{t};
  return Build(g);
}

CacheIdentity IdentityFromTomlFile(const std::string& path) {
  // toml++ reads a directory as an empty table, which would then report its first missing key.
  // A pipe is read as any file (`<(cat id.toml)`, /dev/stdin): a FIFO nobody writes waits, as
  // `cat` would.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error(path + ": a directory, not an identity file");
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    // A file that could not be read has no line ("path:0: File could not be opened").
    const auto line = e.source().begin.line;
    throw std::runtime_error(path + (line ? ":" + std::to_string(line) : std::string()) + ": " +
                             std::string(e.description()));
  }
  RejectUnknownKeys(t, kIdentityKeys, "");
  TomlGetter g{t};
  return Build(g);
}

CacheIdentity IdentityFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error("identity: expected a JSON object");
  JsonGetter g{j};
  return Build(g);
}

nlohmann::json IdentityToJson(const CacheIdentity& id) {
  nlohmann::json j;
  j["tenant"] = id.tenant;
  j["trust_domain"] = id.trust_domain;
  j["model_revision"] = id.model_revision;
  j["model_config_digest"] = id.model_config_digest;
  j["tokenizer_revision"] = id.tokenizer_revision;
  j["adapter"] = id.adapter;
  j["chain"] = nlohmann::json::array();
  for (const Bytes& h : id.chain) j["chain"].push_back(HexEncode(h));
  if (id.multimodal) {
    j["multimodal"] = {{"processor", id.multimodal->processor},
                       {"input_digest", HexEncode(id.multimodal->input_digest)}};
  }
  j["kv_dtype"] = id.kv_dtype;
  j["quant_format"] = id.quant_format;
  j["layout_abi"] = id.layout_abi;
  j["tp_rank"] = id.tp_rank;
  j["tp_size"] = id.tp_size;
  j["pp_rank"] = id.pp_rank;
  j["pp_size"] = id.pp_size;
  j["position_encoding"] = id.position_encoding;
  j["rope_theta_bits"] = BitsToHex(id.rope_theta_bits);
  j["rope_scaling"] = id.rope_scaling;
  j["rope_factor_bits"] = BitsToHex(id.rope_factor_bits);
  j["rope_original_max_positions"] = id.rope_original_max_positions;
  j["block_capacity"] = id.block_capacity;
  j["valid_length"] = id.valid_length;
  return j;
}

}  // namespace gpucache
