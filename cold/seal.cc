#include "cold/seal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

#include <stdexcept>
#include <vector>

namespace gpucache::cold {
namespace {

constexpr std::string_view kSalt = "gpucache-cold-seal";
constexpr std::string_view kInfoTag = "tenant-key";

// Fetched once: a provider lookup costs more than the derivation. The fetched algorithm is
// immutable and may be shared by threads; each derivation has its own context.
EVP_KDF* Hkdf() {
  static EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  return kdf;
}

void PutField(std::vector<uint8_t>& out, std::string_view s) {
  out.push_back(static_cast<uint8_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace

bool IsValidKeyId(std::string_view id) {
  if (id.empty() || id.size() > 32) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

TenantKey DeriveTenantKey(std::span<const uint8_t> secret, std::string_view tenant) {
  std::string info(kInfoTag);
  info.push_back('\0');
  info.append(tenant);
  TenantKey out{};
  EVP_KDF_CTX* ctx = Hkdf() ? EVP_KDF_CTX_new(Hkdf()) : nullptr;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(kSalt.data()),
                                        kSalt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  bool ok = ctx && EVP_KDF_derive(ctx, out.data(), out.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  // Only a broken libcrypto fails here; sealing with a zero key would be silent and wrong.
  if (!ok) throw std::runtime_error("HKDF-SHA256 is not available from libcrypto");
  return out;
}

SealMac ComputeSealMac(const TenantKey& key, std::string_view domain, std::string_view tenant,
                       std::string_view key_id, std::span<const uint8_t> message) {
  std::vector<uint8_t> in(domain.begin(), domain.end());
  in.push_back(0);
  PutField(in, tenant);
  PutField(in, key_id);
  in.insert(in.end(), message.begin(), message.end());
  SealMac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), in.data(), in.size(), mac.data(),
       &len);
  return mac;
}

bool SealMacEqual(const SealMac& a, const SealMac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view ToString(SealCheck c) {
  switch (c) {
    case SealCheck::kOk: return "sealed";
    case SealCheck::kUnsealed: return "unsealed";
    case SealCheck::kUnknownKey: return "unknown-key";
    case SealCheck::kBadSeal: return "bad-seal";
  }
  return "?";
}

}  // namespace gpucache::cold
