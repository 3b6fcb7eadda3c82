#include "fs/errno_map.h"

#include <errno.h>

namespace gpucache {

int ToErrno(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 0;
    case StatusCode::kNotFound: return ENOENT;
    case StatusCode::kIncompatible: return ENOENT;  // a miss, whatever its reason
    case StatusCode::kAccessDenied: return EACCES;
    case StatusCode::kBusy: return EBUSY;
    case StatusCode::kChecksumMismatch: return EIO;
    case StatusCode::kImmutable: return EPERM;
    case StatusCode::kExists: return EEXIST;
    case StatusCode::kInvalidArgument: return EINVAL;
    case StatusCode::kTooLarge: return EFBIG;
    case StatusCode::kTenantQuota: return EDQUOT;
    case StatusCode::kNoSpace: return ENOSPC;
    case StatusCode::kExhausted: return EAGAIN;
    case StatusCode::kFenced: return ESTALE;
    case StatusCode::kDraining: return EROFS;
    case StatusCode::kNotSupported: return ENOTSUP;
    case StatusCode::kNotEmpty: return ENOTEMPTY;
    case StatusCode::kIoError: return EIO;
    case StatusCode::kNameTooLong: return ENAMETOOLONG;
    // The daemon's own fd table, not the caller's: EMFILE would send the engine looking at its
    // own descriptors. EAGAIN says what to do (retry or recompute), as for other credits.
    case StatusCode::kNoHandles: return EAGAIN;
    // A missing attribute, not a missing file: getxattr's ENODATA. A block that left the
    // namespace since it was looked up is kNotFound, ENOENT, as its stat says.
    case StatusCode::kNoAttribute: return ENODATA;
    // An inode of a block that left while its name came back as another block: the kernel
    // looks the path up again on ESTALE (LOOKUP_REVAL), and finds the new block's inode.
    case StatusCode::kStale: return ESTALE;
  }
  return EIO;
}

}  // namespace gpucache

