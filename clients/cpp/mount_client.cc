#include "clients/cpp/mount_client.h"

#include <new>
#include <stdexcept>

#include <errno.h>
#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>

#include "common/commit_frame.h"
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


// The whole frame, header then payload, from one pwritev per FUSE request's worth; a short
// write continues where it stopped (the daemon answers the frame's errno to the rest).
int WriteFrame(int fd, std::span<const uint8_t> head, std::span<const uint8_t> payload) {
  const uint64_t total = head.size() + payload.size();
  uint64_t done = 0;
  while (done < total) {
    iovec iov[2];
    int n_iov = 0;
    if (done < head.size()) {
      iov[n_iov++] = {const_cast<uint8_t*>(head.data() + done), head.size() - done};
    }
    const uint64_t in_payload = done > head.size() ? done - head.size() : 0;
    if (in_payload < payload.size()) {
      iov[n_iov++] = {const_cast<uint8_t*>(payload.data() + in_payload), payload.size() - in_payload};
    }
    ssize_t n = ::pwritev(fd, iov, n_iov, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace

// The commit channel is opened for each frame and closed after it, never kept: a descriptor
// held open on the mount keeps a lazily unmounted gpucachefs alive (the unit's ExecStopPost=
// would wait for the engine to exit), and would outlive the daemon it was opened on.
class MountClient::Channel {
 public:
  // Set once the daemon turned out to have no commit channel (an older gpucachefs).
  bool absent() const { return absent_.load(std::memory_order_relaxed); }
  void set_absent() { absent_.store(true, std::memory_order_relaxed); }

 private:
  std::atomic<bool> absent_{false};
};

MountClient::MountClient(std::string mountpoint)
    : mount_(std::move(mountpoint)), channel_(std::make_shared<Channel>()) {}

std::string MountClient::PathOf(const CacheIdentity& id) const {
  return mount_ + "/" + AddressOf(id).RelativePath();
}

int MountClient::Commit(const CacheIdentity& id, std::span<const uint8_t> payload) const {
  if (channel_->absent()) return CommitByRename(id, payload);
  int err = CommitFrame(id, payload);
  if (err == ENOENT) {
    // The namespace does not exist yet (or the tenant does not: then mkdir says so).
    BlockAddress a = AddressOf(id);
    if (::mkdir((mount_ + "/" + a.tenant + "/" + a.ns).c_str(), 0770) != 0 && errno != EEXIST) return errno;
    err = CommitFrame(id, payload);
  }
  return err;
}

namespace {

constexpr long kFuseSuperMagic = 0x65735546;  // statfs(2): FUSE_SUPER_MAGIC

// A regular file of the filesystem mounted at `mount` itself: the daemon's channel, not a file
// planted in a plain directory (`mount` is then no mount root; a hard link to a local file is
// on another device than a mount root would be) nor one on a filesystem mounted inside it.
// Asked with AT_STATX_DONT_SYNC: the kernel's cached attributes, no request to the daemon (a
// stat and a statfs of the mount cost a commit two round trips, review of the change).
// Blocking again once judged: writes of the frame must not return EAGAIN.
bool IsChannel(int fd, const std::string& mount) {
  struct statx file {}, root {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &file) != 0 || !S_ISREG(file.stx_mode)) {
    return false;
  }
  if (::statx(AT_FDCWD, mount.c_str(), AT_STATX_DONT_SYNC, STATX_TYPE, &root) != 0) return false;
  const bool mount_root = (root.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (root.stx_attributes & STATX_ATTR_MOUNT_ROOT);
  if (!mount_root || file.stx_dev_major != root.stx_dev_major || file.stx_dev_minor != root.stx_dev_minor) {
    return false;
  }
  int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// The channel opened for a write without following a link in `.gpucache` or `commit` and
// without waiting for a FIFO's reader; -errno when it cannot be opened.
int OpenChannel(const std::string& mount) {
  int dir = ::open((mount + "/.gpucache").c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return -errno;
  int fd = ::openat(dir, "commit", O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  int err = errno;
  ::close(dir);
  return fd >= 0 ? fd : -err;
}

}  // namespace

int MountClient::CommitFrame(const CacheIdentity& id, std::span<const uint8_t> payload) const {
  // Not following a link, not waiting for a FIFO's reader: on a stopped daemon's mountpoint (a
  // plain directory anyone may have written) a planted `.gpucache/commit` took the frame, the
  // tenant's KV bytes, into whatever it named, or hung the writer (review, 2026-12-07).
  int fd = OpenChannel(mount_);
  if (fd >= 0 && !IsChannel(fd, mount_)) {
    ::close(fd);
    return ENOTCONN;
  }
  if (fd == -ELOOP || fd == -ENXIO || fd == -ENOTDIR) return ENOTCONN;  // a link, a FIFO
  if (fd < 0) {
    if (fd != -ENOENT) return -fd;
    // No channel: a daemon that has none (it has the control file: remembered, and this block
    // goes by rename), or no daemon here right now (a plain directory, or a mountpoint while its
    // daemon restarts: asked again next time). Without a daemon a rename would commit to the
    // local disk, unchecked, and the next read serve it: ENOTCONN, as the Python client answers
    // (review, 2026-12-07).
    if (!HasDaemon()) return ENOTCONN;
    channel_->set_absent();
    return CommitByRename(id, payload);
  }
  Bytes canonical = EncodePhysicalKey(id);
  std::vector<uint8_t> head = commit_frame::EncodeHeader(AddressOf(id).RelativePath(), canonical, payload.size());
  int err = WriteFrame(fd, head, payload);
  ::close(fd);  // no FLUSH (the daemon said noflush); the RELEASE is not waited for
  return err;
}

int MountClient::CommitByRename(const CacheIdentity& id, std::span<const uint8_t> payload) const {
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

std::variant<Bytes, int> MountClient::Read(const CacheIdentity& id) const { return ReadWholeFile(PathOf(id)); }

bool MountClient::HasDaemon() const {
  struct statfs fs {};
  return ::statfs(mount_.c_str(), &fs) == 0 && fs.f_type == kFuseSuperMagic &&
         ::access((mount_ + "/.gpucache/ctl").c_str(), F_OK) == 0;
}

namespace {

// The bytes of `fd` until its end, or an errno: ENOMEM for a file larger than the memory that
// can hold it (an errno, as the caller's contract promises, not an exception).
std::variant<Bytes, int> ReadAll(int fd) try {
  Bytes out;
  struct stat st;
  if (::fstat(fd, &st) == 0) out.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return out;
    out.insert(out.end(), buf, buf + n);
  }
} catch (const std::bad_alloc&) {
  return ENOMEM;
} catch (const std::length_error&) {
  return ENOMEM;
}

}  // namespace

int WriteAll(int fd, std::span<const uint8_t> data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    data = data.subspan(static_cast<size_t>(n));
  }
  return 0;
}

std::variant<Bytes, int> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  std::variant<Bytes, int> r = ReadAll(fd);
  ::close(fd);
  return r;
}

size_t MountClient::ProbePrefix(std::span<const CacheIdentity> blocks) const {
  size_t n = 0;
  struct stat st;
  while (n < blocks.size() && ::stat(PathOf(blocks[n]).c_str(), &st) == 0) ++n;
  return n;
}

}  // namespace gpucache
