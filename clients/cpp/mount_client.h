// Engine-side helper for a gpucachefs mount: computes paths, commits blocks, probes the longest
// committed prefix, reads blocks. Talks only POSIX to the mount.
//
// Failure policy for engines: any error (a miss, EIO, EBUSY, ENOTCONN, ...) means recompute.
//
// Thread safety: safe to share.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "store/identity.h"

namespace gpucache {

// The whole of the file at `path`, or the errno that stopped reading it (EISDIR for a directory).
std::variant<Bytes, int> ReadWholeFile(const std::string& path);
// Writes all of `data` to `fd` (short writes and EINTR continued): 0 or the errno.
int WriteAll(int fd, std::span<const uint8_t> data);

class MountClient {
 public:
  explicit MountClient(std::string mountpoint);

  // <mount>/<tenant>/<namespace>/<block>
  std::string PathOf(const CacheIdentity& id) const;

  // Commits a block: one frame written to <mount>/.gpucache/commit (adr/0022), one FUSE
  // request up to 1 MiB; the namespace is made (mkdir) when the daemon says it does not exist.
  // A daemon without the commit channel gets CommitByRename. Returns 0 or the errno (EEXIST:
  // another writer has it, or it is already committed).
  int Commit(const CacheIdentity& id, std::span<const uint8_t> payload) const;
  // The commit protocol in plain POSIX: mkdir the namespace (EEXIST is fine), open
  // <block>.part with O_CREAT|O_EXCL|O_WRONLY, fsetxattr user.gpucache.identity, write,
  // close, rename. Returns 0 or the errno of the step that failed. On failure after the create
  // the .part is removed.
  int CommitByRename(const CacheIdentity& id, std::span<const uint8_t> payload) const;

  // The whole block, or the errno (ENOENT on a miss, EIO on corruption).
  std::variant<Bytes, int> Read(const CacheIdentity& id) const;

  // Whether a gpucachefs is mounted there now (it has its control file): tells a miss, or a
  // missing commit channel, from no daemon at all.
  bool HasDaemon() const;

  // How many leading blocks of `blocks` are committed (stat until the first miss).
  size_t ProbePrefix(std::span<const CacheIdentity> blocks) const;

 private:
  // Where the commit channel is, and whether the daemon has one (mount_client.cc).
  class Channel;
  int CommitFrame(const CacheIdentity& id, std::span<const uint8_t> payload) const;

  std::string mount_;
  std::shared_ptr<Channel> channel_;
};

}  // namespace gpucache
