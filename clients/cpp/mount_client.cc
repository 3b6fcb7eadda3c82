#include "clients/cpp/mount_client.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "store/layout.h"

namespace gpucache {
namespace {

constexpr char kIdentityXattr[] = "user.gpucache.identity";
// From this size on a commit declares its size first (one round trip): on a full device the
// daemon then decides whether the block can fit before it evicts anything for it.
constexpr size_t kDeclareSizeFrom = 1 << 20;

// fallocate(2) declares the size; a daemon that cannot (EOPNOTSUPP) is no reason to fail.
int DeclareSize(int fd, size_t size) {
  if (size < kDeclareSizeFrom) return 0;
  if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0) return 0;
  return errno == EOPNOTSUPP || errno == ENOSYS ? 0 : errno;
}

int WriteAll(int fd, std::span<const uint8_t> data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    data = data.subspan(static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace

std::string MountClient::PathOf(const CacheIdentity& id) const {
  return mount_ + "/" + AddressOf(id).RelativePath();
}

int MountClient::Commit(const CacheIdentity& id, std::span<const uint8_t> payload) const {
  BlockAddress a = AddressOf(id);
  std::string dir = mount_ + "/" + a.tenant + "/" + a.ns;
  std::string final_path = dir + "/" + a.block;
  std::string part = final_path + ".part";
  // The namespace usually exists: create first, mkdir only when it does not (one round trip less).
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    if (::mkdir(dir.c_str(), 0770) != 0 && errno != EEXIST) return errno;
    fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  }
  if (fd < 0) return errno;
  Bytes canonical = EncodePhysicalKey(id);
  int err = 0;
  if (::fsetxattr(fd, kIdentityXattr, canonical.data(), canonical.size(), 0) != 0) err = errno;
  if (!err) err = DeclareSize(fd, payload.size());
  if (!err) err = WriteAll(fd, payload);
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(part.c_str(), final_path.c_str()) != 0) err = errno;
  if (err) ::unlink(part.c_str());
  return err;
}

std::variant<Bytes, int> MountClient::Read(const CacheIdentity& id) const {
  int fd = ::open(PathOf(id).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  Bytes out;
  struct stat st;
  if (::fstat(fd, &st) == 0) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

size_t MountClient::ProbePrefix(std::span<const CacheIdentity> blocks) const {
  size_t n = 0;
  struct stat st;
  while (n < blocks.size() && ::stat(PathOf(blocks[n]).c_str(), &st) == 0) ++n;
  return n;
}

}  // namespace gpucache
