// A reply sink: what fs/fuse_ops.cc would send the kernel for a Filesystem result, recorded
// instead of sent, so that unit tests see the errno, the entry and attribute timeouts and the
// open flags of a request without a mount.
//
// fuse_ops.cc keeps its conversions private, so they are restated here; each function names
// the callbacks it stands for. Keep the two in step: the errno comes from the same ToErrno
// (fs/errno_map.h), which is where a mismatch would matter most.
#pragma once

#include <errno.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <utility>

#include "fs/errno_map.h"
#include "fs/filesystem.h"

namespace gpucache::test {

struct Reply {
  int err = 0;            // fuse_reply_err's errno; 0 when the request succeeded
  bool negative = false;  // fuse_reply_entry with ino 0: a miss the kernel may cache
  uint64_t ino = 0;
  struct stat attr {};
  double entry_timeout = -1;  // -1: the reply carried none
  double attr_timeout = -1;
  bool keep_cache = false, direct_io = false, noflush = false;  // fuse_file_info flags
  int backing_id = 0;                                           // fi->backing_id (passthrough)
  std::unique_ptr<Handle> handle;                               // fi->fh

  // What stat(2) of the name would see: a negative entry is ENOENT too.
  int StatErrno() const { return err ? err : (negative ? ENOENT : 0); }
};

// rmdir, unlink, rename, mknod/symlink/link, access, setxattr, fallocate: fuse_reply_err.
inline int ReplyErrno(StatusCode s) {
  return ToErrno(s);
}

// getxattr and removexattr: fuse_reply_err (a missing attribute is kNoAttribute, ENODATA).
inline int ReplyXattrErrno(StatusCode s) {
  return ToErrno(s);
}
inline int ReplyXattrErrno(const Result<std::string>& r) {
  return ToErrno(r.status());
}

// lookup and mkdir: fuse_reply_entry, or fuse_reply_err.
inline Reply ReplyToEntry(const Result<EntryReply>& r) {
  Reply out;
  if (!r.ok()) {
    out.err = ToErrno(r.status());
    return out;
  }
  out.negative = r->ino == 0;
  out.ino = r->ino;
  out.attr = r->attr;
  out.entry_timeout = r->entry_timeout;
  out.attr_timeout = r->attr_timeout;
  return out;
}

// getattr and setattr: fuse_reply_attr, or fuse_reply_err.
inline Reply ReplyToAttr(const Result<AttrReply>& r) {
  Reply out;
  if (!r.ok()) {
    out.err = ToErrno(r.status());
    return out;
  }
  out.ino = r->attr.st_ino;
  out.attr = r->attr;
  out.attr_timeout = r->timeout;
  return out;
}

// open: the flags SetOpenFlags copies into fuse_file_info, or fuse_reply_err.
inline Reply ReplyToOpen(Result<OpenReply> r) {
  Reply out;
  if (!r.ok()) {
    out.err = ToErrno(r.status());
    return out;
  }
  out.keep_cache = r->keep_cache;
  out.direct_io = r->direct_io;
  out.noflush = r->noflush;
  out.backing_id = r->backing_id;
  out.handle = std::move(r->handle);
  return out;
}

// create: fuse_reply_create (an entry and an open file), or fuse_reply_err.
inline Reply ReplyToCreate(Result<std::pair<EntryReply, OpenReply>> r) {
  if (!r.ok()) return ReplyToEntry(r.status());
  Reply out = ReplyToEntry(r->first);
  Reply open = ReplyToOpen(std::move(r->second));
  out.keep_cache = open.keep_cache;
  out.direct_io = open.direct_io;
  out.noflush = open.noflush;
  out.handle = std::move(open.handle);
  return out;
}

}  // namespace gpucache::test
