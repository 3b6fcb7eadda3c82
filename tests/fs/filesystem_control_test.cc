// The control file through the Filesystem (fs/filesystem_files.cc), as fs/fuse_ops.cc drives
// it: what a request written to it may still use when its reply is read.
#include <doctest/doctest.h>
#include <fcntl.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fs/control.h"
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

// Review (2026-12-07): the control file answered whoever wrote to it. A uid of no tenant opened
// it and handed the descriptor to a root helper (SCM_RIGHTS), whose write of {"op":"fence"}
// fenced the store, and the reply was the opener's to read. The commit channel already refused
// a writer other than its opener.
TEST_CASE("Filesystem: only the uid that opened the control file may write requests through it") {
  FsHarness h("daemon");
  const uint64_t epoch = h.store.Stats().epoch;
  Result<OpenReply> open = h.fs.Open(kStranger, kCtlIno, O_RDWR);
  REQUIRE(open.ok());
  Handle& ctl = *open->handle;
  const std::string fence = R"({"op":"fence"})";
  CHECK(h.fs.Write(kRoot, ctl, 0, AsBytes(fence)).status() == StatusCode::kAccessDenied);
  CHECK(h.store.Stats().epoch == epoch);
  std::vector<uint8_t> out(4096);
  Result<size_t> n = h.fs.Read(ctl, 0, out);
  REQUIRE(n.ok());
  CHECK(n.value() == 0);  // no reply to read
  h.fs.Release(ctl);
  // Its opener's own request is answered, by what the opener may do.
  Result<OpenReply> own = h.fs.Open(kRoot, kCtlIno, O_RDWR);
  REQUIRE(own.ok());
  REQUIRE(h.fs.Write(kRoot, *own->handle, 0, AsBytes(fence)).ok());
  CHECK(h.store.Stats().epoch == epoch + 1);
  h.fs.Release(*own->handle);
}

// Review (2026-12-07): only the uid was compared with the opener's: a setgid helper writing a
// caller's request into the caller's descriptor acted with its group (an admin group: any
// admin request).
TEST_CASE("Filesystem: a writer with another gid than the control file's opener, or more groups, acts for nobody") {
  FsHarness h("daemon");
  CacheIdentity id = SampleIdentity("acme");
  h.Commit(id, Payload(10));
  const std::string lookup = nlohmann::json{{"op", "lookup"}, {"identity", HexEncode(EncodePhysicalKey(id))}}.dump();
  const Principal opener{4001, 4001, [] { return std::vector<uint32_t>{}; }};
  const Principal setgid_helper{4001, 3000, [] { return std::vector<uint32_t>{}; }};
  const Principal more_groups{4001, 4001, [] { return std::vector<uint32_t>{3000}; }};
  auto reply_to = [&](const Principal& opened_by, const Principal& writer) {
    Result<OpenReply> open = h.fs.Open(opened_by, kCtlIno, O_RDWR);
    REQUIRE(open.ok());
    Result<size_t> written = h.fs.Write(writer, *open->handle, 0, AsBytes(lookup));
    nlohmann::json reply;
    if (written.ok()) {
      std::vector<uint8_t> out(4096);
      Result<size_t> n = h.fs.Read(*open->handle, 0, out);
      REQUIRE(n.ok());
      reply = nlohmann::json::parse(std::string(out.begin(), out.begin() + n.value()));
    } else {
      reply = {{"status", static_cast<int>(written.status())}};
    }
    h.fs.Release(*open->handle);
    return reply;
  };
  CHECK(reply_to(opener, setgid_helper)["status"] == static_cast<int>(StatusCode::kAccessDenied));
  CHECK(reply_to(opener, more_groups)["ok"] == false);  // judged with the opener's groups: none
  CHECK(reply_to(more_groups, more_groups)["result"] == "hit");  // a member at the open
}

// Review (2026-12-07): a request answered on read (any with "wait_ms") was kept whole, up to
// 64 KiB, until its reply was read or the file closed: a uid of no tenant holding 8,000 opens
// grew the daemon by 0.5 GB. A non-admin uid may now keep a bounded number waiting, and uids of
// no tenant have a smaller pool of their own, which they cannot take from the members.
TEST_CASE("Filesystem: the control requests a non-admin uid keeps waiting for their reads are bounded") {
  FsHarness h("daemon");
  std::string request = R"({"op":"status","wait_ms":0,"pad":")";
  request += std::string(kMaxControlRequest - request.size() - 2, 'x') + "\"}";
  REQUIRE(request.size() == kMaxControlRequest);
  std::vector<std::unique_ptr<Handle>> opens;
  auto write_many = [&](const Principal& c, int n, StatusCode* refused) {
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      Result<OpenReply> open = h.fs.Open(c, kCtlIno, O_RDWR);
      REQUIRE(open.ok());
      Result<size_t> written = h.fs.Write(c, *open->handle, 0, AsBytes(request));
      opens.push_back(std::move(open->handle));
      if (written.ok()) ++kept;
      else *refused = written.status();
    }
    return kept;
  };
  StatusCode refused = StatusCode::kOk;
  CHECK(write_many(kWriter, 40, &refused) == Filesystem::kMaxWaitingPerCaller);  // a member
  CHECK(refused == StatusCode::kExhausted);
  // A read (the request answered) gives its place back; so does a close.
  std::vector<uint8_t> out(4096);
  REQUIRE(h.fs.Read(*opens[0], 0, out).ok());
  CHECK(h.fs.Write(kWriter, *opens[Filesystem::kMaxWaitingPerCaller], 0, AsBytes(request)).ok());
  h.fs.Release(*opens[1]);
  opens[1].reset();
  CHECK(h.fs.Write(kWriter, *opens[Filesystem::kMaxWaitingPerCaller + 1], 0, AsBytes(request)).ok());
  CHECK_FALSE(h.fs.Write(kWriter, *opens[Filesystem::kMaxWaitingPerCaller + 2], 0, AsBytes(request)).ok());
  // Uids of no tenant: a few places each, from a pool the members do not share.
  // (Enough of them to fill every place of one shared pool.)
  for (uint32_t uid = 5000; uid < 5020; ++uid) {
    const int kept = write_many(Principal{uid, uid, nullptr}, Filesystem::kMaxWaitingPerCaller, &refused);
    CHECK(kept <= Filesystem::kMaxWaitingPerStranger);
  }
  CHECK(write_many(kMember, 1, &refused) == 1);  // another member: its own places, still there
  CHECK(write_many(kRoot, 1, &refused) == 1);    // an admin: not counted
  for (auto& open : opens) {
    if (open) h.fs.Release(*open);
  }
}

// Review (2026-12-07): the places were bounded per uid and for all, not per tenant: 17 uids of
// a tenant given by gid took all 256 between them, and every other tenant's requests answered on
// read (a synchronous cold refill) were EAGAIN.
TEST_CASE("Filesystem: one tenant's many uids keep at most a quarter of the waiting control requests") {
  FsHarness h("daemon");
  const std::string request = R"({"op":"status","wait_ms":0})";
  std::vector<std::unique_ptr<Handle>> opens;
  auto write_one = [&](const Principal& c) {
    Result<OpenReply> open = h.fs.Open(c, kCtlIno, O_RDWR);
    REQUIRE(open.ok());
    Result<size_t> written = h.fs.Write(c, *open->handle, 0, AsBytes(request));
    opens.push_back(std::move(open->handle));
    return written.ok();
  };
  int kept = 0;
  for (uint32_t uid = 6000; uid < 6020; ++uid) {  // acme's members through group 3000
    for (int i = 0; i < Filesystem::kMaxWaitingPerCaller; ++i) kept += write_one(Principal{uid, 3000, nullptr});
  }
  CHECK(kept == Filesystem::kMaxWaitingPerTenant);
  CHECK(write_one(kOutsider));  // globex still has its places
  // A place given back is acme's again.
  for (auto& open : opens) h.fs.Release(*open);
  opens.clear();
  CHECK(write_one(Principal{6000, 3000, nullptr}));
  for (auto& open : opens) h.fs.Release(*open);
}

}  // namespace
}  // namespace gpucache
