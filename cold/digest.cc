#include "cold/digest.h"

#include <openssl/evp.h>

#include "store/identity.h"

namespace gpucache::cold {

Sha256 ComputeSha256(std::span<const uint8_t> bytes) {
  Sha256 out{};
  unsigned int len = 0;
  // EVP_Digest is one-shot and allocation-free for SHA-256; it cannot fail for valid input.
  EVP_Digest(bytes.data(), bytes.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

std::string ToHex(const Sha256& digest) { return HexEncode(digest); }

std::string Sha256Hex(std::span<const uint8_t> bytes) { return ToHex(ComputeSha256(bytes)); }

}  // namespace gpucache::cold
