// Engine-side helper for a gpucachefs mount: computes paths, commits blocks with the commit
// protocol, probes the longest committed prefix, reads blocks. Talks only POSIX to the mount;
// it never needs the daemon's cooperation beyond the filesystem itself.
//
// Failure policy for engines: any error (a miss, EIO, EBUSY, ENOTCONN, ...) means recompute.
//
// Thread safety: stateless apart from the mountpoint; safe to share.
#pragma once

#include <span>
#include <string>
#include <variant>
#include <vector>

#include "store/identity.h"

namespace gpucache {

class MountClient {
 public:
  explicit MountClient(std::string mountpoint) : mount_(std::move(mountpoint)) {}

  // <mount>/<tenant>/<namespace>/<block>
  std::string PathOf(const CacheIdentity& id) const;

  // The commit protocol: mkdir the namespace (EEXIST is fine), open <block>.part with
  // O_CREAT|O_EXCL|O_WRONLY, fsetxattr user.gpucache.identity, write, close, rename.
  // Returns 0 or the errno of the step that failed (EEXIST: another writer has it, or it is
  // already committed). On failure after the create the .part is removed.
  int Commit(const CacheIdentity& id, std::span<const uint8_t> payload) const;

  // The whole block, or the errno (ENOENT on a miss, EIO on corruption).
  std::variant<Bytes, int> Read(const CacheIdentity& id) const;

  // How many leading blocks of `blocks` are committed (stat until the first miss).
  size_t ProbePrefix(std::span<const CacheIdentity> blocks) const;

 private:
  std::string mount_;
};

}  // namespace gpucache
