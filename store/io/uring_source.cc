#include "store/io/uring_source.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

namespace gpucache {

UringSource::UringSource(UringReader& reader, Fd fd, uint64_t data_offset)
    : reader_(reader), fd_(std::move(fd)), data_offset_(data_offset) {
  struct statfs st{};
  memory_backed_ = ::fstatfs(fd_.get(), &st) == 0 && st.f_type == TMPFS_MAGIC;
  if (reader_.use_direct() && !memory_backed_) direct_fd_ = OpenDirect(fd_.get());
}

StatusCode UringSource::ReadRaw(uint64_t offset, std::span<uint8_t> out) {
  if (memory_backed_) return PreadFull(fd_.get(), out, data_offset_ + offset);
  return reader_.Read(ReadTarget{fd_.get(), direct_fd_.get()}, data_offset_ + offset, out);
}

std::optional<FileCutShort> UringSource::CutShort(uint64_t payload_bytes) {
  struct stat st{};
  if (::fstat(fd_.get(), &st) != 0) return std::nullopt;
  const uint64_t has = static_cast<uint64_t>(st.st_size);
  if (has >= data_offset_ + payload_bytes) return std::nullopt;
  return FileCutShort{data_offset_ + payload_bytes, has};
}

}  // namespace gpucache
