// libFuzzer: the block file header parser (files on disk may be damaged or planted).
// Property: a header that parses re-encodes to exactly the bytes it came from, and its lengths
// agree with the format (chunk size, chunk count).
#include <cstdlib>

#include "store/block_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = gpucache::DecodeBlockHeader({data, size}, 0);
  if (!h.ok()) return 0;
  gpucache::Bytes again = gpucache::EncodeBlockHeader(h.value());
  if (again.size() > size || !std::equal(again.begin(), again.end(), data)) std::abort();
  if (h->data_offset % 4096 != 0 || h->data_offset < again.size()) std::abort();
  // The lengths agree as the format defines them: a reader sizes buffers and indexes the chunk
  // sums by them (docs/block-format.md).
  const uint64_t len = h->payload_length, cs = h->checksums.chunk_size;
  if (cs != gpucache::ChunkSizeFor(len) || h->checksums.chunks.size() != len / cs + (len % cs != 0)) {
    std::abort();
  }
  return 0;
}
