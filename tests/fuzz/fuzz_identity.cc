// libFuzzer: the identity decoder (the user.gpucache.identity xattr, hostile input).
// Properties: nothing malformed is accepted (what decodes validates), and decoding is exact:
// encode(decode(bytes)) == bytes, so two encodings never name one identity.
#include <cstdlib>

#include "store/identity.h"
#include "store/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto id = gpucache::DecodePhysicalKey({data, size});
  if (!id.ok()) return 0;
  if (gpucache::Validate(id.value()) != gpucache::StatusCode::kOk) std::abort();
  gpucache::Bytes again = gpucache::EncodePhysicalKey(id.value());
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  gpucache::BlockAddress a = gpucache::AddressOf(id.value());
  if (!gpucache::IsValidNamespaceName(a.ns) || !gpucache::IsValidBlockName(a.block)) std::abort();
  (void)gpucache::RenderIdentity(id.value());
  return 0;
}
