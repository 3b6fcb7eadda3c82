// UringSource: an RawSource over a block file read through a UringReader: the
// io_uring counterpart of FileMedium's FileSource (pread at data_offset + offset). Payload bytes
// come back raw; VerifyingReader checks them against the chunk sums as before.
//
// On tmpfs the source reads with pread (PreadFull) like FileSource: the bytes are already in
// memory, and io_uring into a registered buffer plus a copy measured 0.65x of pread there
// (gpucache-io-bench on /dev/shm). Since Linux 6.6 tmpfs accepts O_DIRECT, so the O_DIRECT
// probe alone would not route it to pread.
#pragma once

#include <cstdint>
#include <span>

#include "store/indexed_store.h"
#include "store/io/uring_reader.h"
#include "store/posix_io.h"

namespace gpucache {

class UringSource final : public RawSource {
 public:
  // Takes the block file's descriptor (opened O_RDONLY, header already checked) and, when the
  // reader uses O_DIRECT and the filesystem allows it, opens a second, O_DIRECT descriptor on
  // the same inode. `reader` is borrowed and must outlive the source.
  UringSource(UringReader& reader, Fd fd, uint64_t data_offset);

  // Fills `out` from payload offset `offset`; kIoError on a short, failed or timed-out read.
  StatusCode ReadRaw(uint64_t offset, std::span<uint8_t> out) override;
  std::optional<FileCutShort> CutShort(uint64_t payload_bytes) override;
  bool direct() const { return direct_fd_.valid(); }
  // tmpfs (a RAM tier in /dev/shm): read with pread, io_uring has nothing to overlap there.
  bool memory_backed() const { return memory_backed_; }

 private:
  UringReader& reader_;
  Fd fd_;
  Fd direct_fd_;  // invalid: buffered
  bool memory_backed_ = false;
  const uint64_t data_offset_;
};

}  // namespace gpucache
