// libFuzzer: the manifest v3/v4 decoder and the locator v1/v2 decoder (both come from the object store,
// which is outside the daemon's trust). Properties: an accepted manifest re-encodes to exactly
// the bytes it came from (decode(encode(x)) == x) and obeys every rule the decoder promises;
// an accepted locator re-encodes the same way.
#include <cstdlib>
#include <set>

#include "cold/locator.h"
#include "cold/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpucache::cold;
  std::span<const uint8_t> in(data, size);
  if (auto loc = DecodeLocator(in); loc) {
    std::vector<uint8_t> again =
        loc->version == 1 ? EncodeLegacyLocator(loc->manifest_digest) : EncodeLocator(*loc);
    if (again != std::vector<uint8_t>(data, data + size)) std::abort();
  }
  DecodedManifest d = DecodeManifest(in);
  if (d.error != ManifestError::kNone) return 0;
  if (EncodeManifest(d.manifest) != std::vector<uint8_t>(data, data + size)) std::abort();
  const Manifest& m = d.manifest;
  if (m.entries.empty() || m.entries.size() > kMaxManifestEntries) std::abort();
  uint64_t end = 0;
  std::set<gpucache::BlockAddress> seen;
  for (const ManifestEntry& e : m.entries) {
    if (e.offset < end || e.offset + e.length > m.object_size || e.offset + e.length < e.offset) {
      std::abort();
    }
    if (!gpucache::IsValidTenantName(e.address.tenant) || !seen.insert(e.address).second) std::abort();
    end = e.offset + e.length;
  }
  return 0;
}
