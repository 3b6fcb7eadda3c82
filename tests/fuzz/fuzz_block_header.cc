// libFuzzer: the block file header parser (files on disk may be damaged or planted).
// Property: a header that parses re-encodes to exactly the bytes it came from.
#include <cstdlib>

#include "store/block_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = gpucache::DecodeBlockHeader({data, size}, 0);
  if (!h.ok()) return 0;
  gpucache::Bytes again = gpucache::EncodeBlockHeader(h.value());
  if (again.size() > size || !std::equal(again.begin(), again.end(), data)) std::abort();
  if (h->data_offset % 4096 != 0 || h->data_offset < again.size()) std::abort();
  return 0;
}
