// The control file through the Filesystem (fs/filesystem_files.cc), as fs/fuse_ops.cc drives
// it: what a request written to it may still use when its reply is read.
#include <doctest/doctest.h>
#include <fcntl.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "store/identity.h"
#include "tests/support/fs_harness.h"

namespace gpucache {
namespace {

using namespace test;

// Regression (review, 2026-12-06): a request answered on read (one with "wait_ms", or a
// synchronous cold op) kept its caller as written, with a groups reader that reads the FUSE
// request; fuse_reply_write had freed that request by the time the read ran it, so a member
// through a supplementary group was judged by whatever the freed memory then held.
TEST_CASE("Filesystem: a control request answered on read has its caller's groups read before the write returns") {
  FsHarness h("daemon");
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  // A member of acme only through supplementary group 3000 (FsConfigText), whose request is
  // alive until the write returns.
  auto alive = std::make_shared<bool>(true);
  auto read_after_reply = std::make_shared<int>(0);
  const Principal member{4001, 4001, [alive, read_after_reply] {
                           if (!*alive) ++*read_after_reply;
                           return std::vector<uint32_t>{3000};
                         }};
  Result<OpenReply> open = h.fs.Open(member, kCtlIno, O_RDWR);
  REQUIRE(open.ok());
  Handle& ctl = *open->handle;
  const std::string request = nlohmann::json{{"op", "lookup"},
                                             {"identity", HexEncode(EncodePhysicalKey(id))},
                                             {"wait_ms", 0}}
                                  .dump();
  Result<size_t> written = h.fs.Write(member, ctl, 0, AsBytes(request));
  REQUIRE(written.ok());
  CHECK(written.value() == request.size());
  *alive = false;  // the write was answered: the FUSE request is gone
  std::vector<uint8_t> out(4096);
  Result<size_t> n = h.fs.Read(ctl, 0, out);
  REQUIRE(n.ok());
  nlohmann::json reply = nlohmann::json::parse(std::string(out.begin(), out.begin() + n.value()));
  CHECK(reply["ok"] == true);
  CHECK(reply["result"] == "hit");  // a member: its group counted, read while it could be
  CHECK(*read_after_reply == 0);
  h.fs.Release(ctl);
}

}  // namespace
}  // namespace gpucache
