// The names of the store contract's values (store/block_store.h), for logs, xattrs and tools.
#include "store/block_store.h"

namespace gpucache {

std::string_view ToString(MissReason reason) {
  switch (reason) {
    case MissReason::kAbsent: return "absent";
    case MissReason::kIncompatible: return "incompatible";
    case MissReason::kQuarantined: return "quarantined";
    case MissReason::kFenced: return "fenced";
  }
  return "unknown";
}

std::string_view ToString(LookupResult::Kind kind) {
  switch (kind) {
    case LookupResult::Kind::kHit: return "hit";
    case LookupResult::Kind::kPrefixHit: return "prefix_hit";
    case LookupResult::Kind::kMiss: return "miss";
  }
  return "unknown";
}

std::string_view ToString(RemovalReason reason) {
  switch (reason) {
    case RemovalReason::kEvicted: return "evicted";
    case RemovalReason::kCorrupt: return "corrupt";
    case RemovalReason::kLost: return "lost";
  }
  return "unknown";
}

std::string_view ToString(FillState state) {
  switch (state) {
    case FillState::kPending: return "pending";
    case FillState::kFinished: return "finished";
    case FillState::kFailed: return "failed";
    case FillState::kFenced: return "fenced";
  }
  return "unknown";
}

}  // namespace gpucache
