#include "store/status.h"

namespace gpucache {

std::string_view ToString(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIncompatible: return "incompatible";
    case StatusCode::kAccessDenied: return "access denied";
    case StatusCode::kBusy: return "busy";
    case StatusCode::kChecksumMismatch: return "checksum mismatch";
    case StatusCode::kImmutable: return "immutable";
    case StatusCode::kExists: return "exists";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kTooLarge: return "too large";
    case StatusCode::kTenantQuota: return "tenant quota exceeded";
    case StatusCode::kNoSpace: return "no space";
    case StatusCode::kExhausted: return "credits exhausted";
    case StatusCode::kFenced: return "fenced";
    case StatusCode::kDraining: return "draining";
    case StatusCode::kNotSupported: return "not supported";
    case StatusCode::kNotEmpty: return "not empty";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kNameTooLong: return "name too long";
    case StatusCode::kNoHandles: return "out of file handles";
    case StatusCode::kNoAttribute: return "no such attribute";
    case StatusCode::kStale: return "stale inode";
  }
  return "unknown";
}

}  // namespace gpucache
