#include "store/layout.h"

#include "store/fast_hash.h"

namespace gpucache {
namespace {

bool IsSlugChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Keeps [A-Za-z0-9._-], replaces anything else by '_', and cuts to `limit` bytes.
std::string Sanitize(std::string_view s, size_t limit) {
  std::string out;
  for (char c : s.substr(0, limit)) out.push_back(IsSlugChar(c) ? c : '_');
  return out;
}

}  // namespace

std::string Xxh128Hex(std::span<const uint8_t> bytes) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits(bytes.data(), bytes.size()));
  return HexEncode({canon.digest, sizeof canon.digest});
}

std::string NamespaceSlug(const CacheIdentity& id) {
  std::string_view model = id.model_revision;
  if (auto slash = model.rfind('/'); slash != std::string_view::npos) model = model.substr(slash + 1);
  if (auto at = model.find('@'); at != std::string_view::npos) model = model.substr(0, at);
  std::string slug = Sanitize(model, 32);
  if (slug.empty()) slug = "model";
  if (slug[0] == '.') slug[0] = '_';  // never a hidden name, never "." or ".."
  slug += "." + Sanitize(id.kv_dtype, 12);
  slug += ".tp" + std::to_string(id.tp_rank) + "of" + std::to_string(id.tp_size);
  slug += ".pp" + std::to_string(id.pp_rank) + "of" + std::to_string(id.pp_size);
  return slug;
}

std::string NamespaceName(const CacheIdentity& id) {
  return NamespaceSlug(id) + "-" + Xxh128Hex(EncodeNamespaceFields(id));
}

std::string BlockName(const CacheIdentity& id) { return Xxh128Hex(EncodeBlockFields(id)); }

BlockAddress AddressOf(const CacheIdentity& id) {
  return {id.tenant, NamespaceName(id), BlockName(id)};
}

bool IsValidNamespaceName(std::string_view name) {
  if (name.size() < kDigestHexLength + 2 || name.size() > kMaxSlugLength + 1 + kDigestHexLength) {
    return false;
  }
  std::string_view slug = name.substr(0, name.size() - kDigestHexLength - 1);
  if (name[slug.size()] != '-' || !IsLowerHex(name.substr(slug.size() + 1))) return false;
  if (slug.front() == '.') return false;  // never hidden, never "." or ".."
  for (char c : slug) {
    if (!IsSlugChar(c)) return false;
  }
  return true;
}

bool IsValidBlockName(std::string_view name) {
  return name.size() == kDigestHexLength && IsLowerHex(name);
}

}  // namespace gpucache
