// Identities as people and scripts write them: TOML files (gpucachectl path, gpucache-client)
// and JSON objects (the shared test vectors). Both use the same keys:
//
//   tenant, trust_domain, model_revision, model_config_digest, tokenizer_revision, adapter,
//   chain = [hex, ...], multimodal = { processor, input_digest (hex) } (optional),
//   kv_dtype, quant_format, layout_abi, tp_rank, tp_size, pp_rank, pp_size,
//   position_encoding, rope_theta (float) or rope_theta_bits ("0x" + 16 hex digits),
//   rope_scaling, rope_factor (float) or rope_factor_bits, rope_original_max_positions,
//   block_capacity, valid_length
//
// Parsing throws std::runtime_error whose message names the offending key; the result is
// validated (gpucache::Validate) before it is returned.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "store/identity.h"

namespace gpucache {

CacheIdentity IdentityFromTomlFile(const std::string& path);
CacheIdentity IdentityFromTomlString(const std::string& text);
CacheIdentity IdentityFromJson(const nlohmann::json& j);
nlohmann::json IdentityToJson(const CacheIdentity& id);

}  // namespace gpucache
