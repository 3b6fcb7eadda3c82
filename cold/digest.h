// SHA-256 for content addresses in the cold tier (pack objects, manifests, identity digests).
// Collision resistance matters here: an object's key *is* the proof of what it holds, and a
// manifest binds each range to the digest of a canonical identity, so a fast non-cryptographic
// hash (the hot tier's XXH3) is not enough.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace gpucache::cold {

using Sha256 = std::array<uint8_t, 32>;

Sha256 ComputeSha256(std::span<const uint8_t> bytes);
std::string Sha256Hex(std::span<const uint8_t> bytes);
std::string ToHex(const Sha256& digest);

}  // namespace gpucache::cold
