#include "fs/errno_map.h"

#include <doctest/doctest.h>
#include <errno.h>

#include <map>
#include <string>

#include "common/control_protocol.h"

namespace gpucache {
namespace {

TEST_CASE("ErrnoMap: every status code maps to the errno of the table in docs/user-guide.md") {
  const std::map<StatusCode, int> expected = {
      {StatusCode::kOk, 0},
      {StatusCode::kNotFound, ENOENT},
      {StatusCode::kIncompatible, ENOENT},
      {StatusCode::kAccessDenied, EACCES},
      {StatusCode::kBusy, EBUSY},
      {StatusCode::kChecksumMismatch, EIO},
      {StatusCode::kImmutable, EPERM},
      {StatusCode::kExists, EEXIST},
      {StatusCode::kInvalidArgument, EINVAL},
      {StatusCode::kTooLarge, EFBIG},
      {StatusCode::kTenantQuota, EDQUOT},
      {StatusCode::kNoSpace, ENOSPC},
      {StatusCode::kExhausted, EAGAIN},
      {StatusCode::kFenced, ESTALE},
      {StatusCode::kDraining, EROFS},
      {StatusCode::kNotSupported, ENOTSUP},
      {StatusCode::kNotEmpty, ENOTEMPTY},
      {StatusCode::kIoError, EIO},
      {StatusCode::kNameTooLong, ENAMETOOLONG},
      {StatusCode::kNoHandles, EAGAIN},
      {StatusCode::kNoAttribute, ENODATA},
      {StatusCode::kStale, ESTALE},
  };
  for (StatusCode code : kAllStatusCodes) {
    CAPTURE(ToString(code));
    REQUIRE(expected.count(code) == 1);  // a new code must be added here and to the mapping
    CHECK(ToErrno(code) == expected.at(code));
  }
  CHECK(expected.size() == std::size(kAllStatusCodes));
}

// Control replies carry the errno's symbolic name (docs/control-protocol.md), derived in one
// place (common/control_protocol.h) from the same map.
TEST_CASE("ErrnoMap: every refusal's errno has the symbolic name control replies carry") {
  const std::map<StatusCode, std::string> expected = {
      {StatusCode::kNotFound, "ENOENT"},      {StatusCode::kIncompatible, "ENOENT"},
      {StatusCode::kAccessDenied, "EACCES"},  {StatusCode::kBusy, "EBUSY"},
      {StatusCode::kChecksumMismatch, "EIO"}, {StatusCode::kImmutable, "EPERM"},
      {StatusCode::kExists, "EEXIST"},        {StatusCode::kInvalidArgument, "EINVAL"},
      {StatusCode::kTooLarge, "EFBIG"},       {StatusCode::kTenantQuota, "EDQUOT"},
      {StatusCode::kNoSpace, "ENOSPC"},       {StatusCode::kExhausted, "EAGAIN"},
      {StatusCode::kFenced, "ESTALE"},        {StatusCode::kDraining, "EROFS"},
      {StatusCode::kNotSupported, "ENOTSUP"}, {StatusCode::kNotEmpty, "ENOTEMPTY"},
      {StatusCode::kIoError, "EIO"},          {StatusCode::kNameTooLong, "ENAMETOOLONG"},
      {StatusCode::kNoHandles, "EAGAIN"},     {StatusCode::kNoAttribute, "ENODATA"},
      {StatusCode::kStale, "ESTALE"},
  };
  for (StatusCode code : kAllStatusCodes) {
    if (code == StatusCode::kOk) continue;
    CAPTURE(ToString(code));
    REQUIRE(expected.count(code) == 1);
    CHECK(control_protocol::ErrnoName(ToErrno(code)) == expected.at(code));
  }
  nlohmann::json reply = nlohmann::json::parse(control_protocol::Error(ENOTSUP, "why"));
  CHECK(reply == nlohmann::json{{"ok", false}, {"errno", "ENOTSUP"}, {"error", "why"}});
}

}  // namespace
}  // namespace gpucache
