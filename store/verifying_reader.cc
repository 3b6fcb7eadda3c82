#include "store/verifying_reader.h"

#include <algorithm>
#include <string>
#include <vector>

#include "store/store_core.h"

namespace gpucache {

VerifyingReader::~VerifyingReader() {
  if (holds_block_) store_.ReaderClosed(info_.address, info_.region_id);
}

BlockLocation VerifyingReader::Location() const {
  return store_.medium_->LocationOf(info_.address, stored_.get());
}

// Reads whole chunks (the unit a checksum covers) and checks each before copying out the
// bytes asked for.
Result<size_t> VerifyingReader::Read(uint64_t offset, std::span<uint8_t> out) {
  if (offset >= info_.size || out.empty()) return size_t{0};
  uint64_t end = std::min<uint64_t>(info_.size, offset + out.size());
  uint64_t cs = sums_.chunk_size;
  uint64_t first = offset / cs, last = (end - 1) / cs;
  uint64_t span_start = first * cs;
  uint64_t span_end = std::min<uint64_t>(info_.size, (last + 1) * cs);
  if (last >= sums_.chunks.size()) {  // the header's sums do not cover the size it was given
    store_.ReportCorrupt(info_.address, info_.region_id, "chunk " + std::to_string(last) + " has no checksum");
    return StatusCode::kChecksumMismatch;
  }
  thread_local std::vector<uint8_t> buf;
  buf.resize(span_end - span_start);
  if (StatusCode s = src_->ReadRaw(span_start, buf); s != StatusCode::kOk) {
    // Here, not in each caller: a client's read, a RAM-tier copy and a cold pack all count.
    // A file cut short since its open fails as EIO too: told apart here, for the log.
    if (s == StatusCode::kIoError) {
      store_.ReportReadError({info_.address, Location(), src_->CutShort(info_.size)});
    }
    return s;
  }
  for (uint64_t c = first; c <= last; ++c) {
    uint64_t at = c * cs - span_start;
    uint64_t len = std::min<uint64_t>(cs, info_.size - c * cs);
    if (ChunkChecksum({buf.data() + at, len}, c) != sums_.chunks[c]) {
      store_.ReportCorrupt(info_.address, info_.region_id,
                           "chunk " + std::to_string(c) + " (bytes " + std::to_string(c * cs) + "-" +
                               std::to_string(c * cs + len - 1) + ")");
      return StatusCode::kChecksumMismatch;
    }
  }
  std::copy_n(buf.data() + (offset - span_start), end - offset, out.data());
  return size_t(end - offset);
}

}  // namespace gpucache
