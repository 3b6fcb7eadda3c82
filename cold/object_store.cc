#include "cold/object_store.h"

namespace gpucache::cold {

std::string_view ToString(ObjectErrorKind kind) {
  switch (kind) {
    case ObjectErrorKind::kNotFound: return "not found";
    case ObjectErrorKind::kTemporary: return "temporary";
    case ObjectErrorKind::kPermanent: return "permanent";
  }
  return "unknown";
}

}  // namespace gpucache::cold
