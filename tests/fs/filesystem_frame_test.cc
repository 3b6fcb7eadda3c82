// The commit channel (fs/filesystem_commit.cc, adr/0022) at the Filesystem level: what a frame
// that fails leaves in the daemon's memory, and who may write through an open of the channel.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <malloc.h>

#include <memory>
#include <vector>

#include "common/commit_frame.h"
#include "tests/support/fs_harness.h"

namespace gpucache {
namespace {

using namespace test;

Bytes Frame(const CacheIdentity& id, const Bytes& identity, const Bytes& payload) {
  Bytes f = commit_frame::EncodeHeader(AddressOf(id).RelativePath(), identity, payload.size());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

std::unique_ptr<Handle> OpenChannel(FsHarness& h, const Principal& c) {
  Result<OpenReply> r = h.fs.Open(c, kCommitIno, O_WRONLY);
  REQUIRE(r.ok());
  return std::move(r->handle);
}

TEST_CASE("Filesystem frame: a refused frame keeps nothing of its header in the daemon") {
  // Found by review: every open of the channel kept the header of its last frame, refused or not
  // (up to 64 KiB of identity, copied before any check), so one local user holding many opens
  // pinned the daemon's memory (530 MB from 8,000 opens).
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Namespace(id);
  const Bytes identity(commit_frame::kMaxFrameIdentity, 0x5a);  // the largest a frame may carry
  const Bytes frame = Frame(id, identity, Payload(16));
  constexpr int kOpens = 500;
  std::vector<std::unique_ptr<Handle>> opens;
  for (int i = 0; i < kOpens; ++i) opens.push_back(OpenChannel(h, kStranger));
  const size_t before = mallinfo2().uordblks;
  for (auto& open : opens) {
    // A caller of no tenant: refused once the header is read.
    CHECK(h.fs.Write(kStranger, *open, 0, frame).status() == StatusCode::kAccessDenied);
  }
  const size_t held = mallinfo2().uordblks - before;
  CAPTURE(held);
  CHECK(held < kOpens * identity.size() / 8);  // the old code held all of them: 8 MB here
  for (auto& open : opens) h.fs.Release(*open);
}

TEST_CASE("Filesystem frame: an identity larger than the store takes is refused before it is kept") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.Namespace(id);
  auto open = OpenChannel(h, kWriter);
  Bytes frame = Frame(id, Bytes(commit_frame::kMaxFrameIdentity + 1, 1), Payload(16));
  CHECK(h.fs.Write(kWriter, *open, 0, frame).status() == StatusCode::kInvalidArgument);
  h.fs.Release(*open);
}

TEST_CASE("Filesystem frame: only the uid that opened the channel may write frames through it") {
  // A descriptor handed to a more privileged writer (a root helper writing into a caller's fd)
  // would otherwise commit as that writer: into any tenant, as an admin.
  FsHarness h;
  CacheIdentity globex = SampleIdentity("globex");
  const uint64_t ns = h.Namespace(globex, kOutsider);
  auto committed = [&] {
    return !ReplyToEntry(h.fs.Lookup(kOutsider, ns, FsHarness::BlockName(globex))).negative;
  };
  auto open = OpenChannel(h, kOutsider);
  CHECK(h.fs.Write(kRoot, *open, 0, Frame(globex, EncodePhysicalKey(globex), Payload(16))).status() ==
        StatusCode::kAccessDenied);
  CHECK_FALSE(committed());
  // Its opener may.
  Result<size_t> n = h.fs.Write(kOutsider, *open, 0, Frame(globex, EncodePhysicalKey(globex), Payload(16)));
  REQUIRE(n.ok());
  h.fs.Release(*open);
  CHECK(committed());
}

// Review (2026-12-07): only the uid was compared with the opener's. A setgid helper (the same
// uid, another gid) writing into a caller's descriptor committed into the tenant of its group,
// and a helper with more supplementary groups than the opener acted with them.
TEST_CASE("Filesystem frame: a writer with another gid than the opener, or more groups, commits nothing") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");  // acme: uids 0 and 1000, gid 3000 (FsConfigText)
  const uint64_t ns = h.Namespace(id);
  const Bytes frame = Frame(id, EncodePhysicalKey(id), Payload(16));
  auto committed = [&] { return !ReplyToEntry(h.fs.Lookup(kRoot, ns, FsHarness::BlockName(id))).negative; };
  const Principal opener{4001, 4001, [] { return std::vector<uint32_t>{}; }};
  const Principal setgid_helper{4001, 3000, [] { return std::vector<uint32_t>{}; }};
  const Principal more_groups{4001, 4001, [] { return std::vector<uint32_t>{3000}; }};
  for (const Principal& writer : {setgid_helper, more_groups}) {
    auto open = OpenChannel(h, opener);
    CHECK(h.fs.Write(writer, *open, 0, frame).status() == StatusCode::kAccessDenied);
    h.fs.Release(*open);
    CHECK_FALSE(committed());
  }
  CHECK(h.store.Stats().tenants["acme"].commits == 0);
  // The same groups at the open: a member, who commits.
  auto open = OpenChannel(h, more_groups);
  CHECK(h.fs.Write(more_groups, *open, 0, frame).ok());
  h.fs.Release(*open);
  CHECK(committed());
}

// Review (2026-12-07): the kernel names a writer outside the daemon's pid namespace thread 0, so
// every thread of such an engine looked like the frame's own: a second thread's header at
// offset 0 restarted the first's frame, and a block of both payloads was committed.
TEST_CASE("Filesystem frame: a writer the kernel cannot name never restarts a frame in progress") {
  FsHarness h;
  CacheIdentity a = SampleIdentity("acme", 1), b = SampleIdentity("acme", 2);
  const uint64_t ns = h.Namespace(a);
  const Bytes payload_a = Payload(8192, 'A');
  const Bytes frame_a = Frame(a, EncodePhysicalKey(a), payload_a);
  const Bytes frame_b = Frame(b, EncodePhysicalKey(b), Payload(8192, 'B'));
  Principal unnamed = kWriter;
  unnamed.thread = 0;
  auto open = OpenChannel(h, kWriter);
  const size_t first = frame_a.size() - 4096;
  REQUIRE(h.fs.Write(unnamed, *open, 0, std::span(frame_a).first(first)).ok());
  CHECK(h.fs.Write(unnamed, *open, 0, frame_b).status() == StatusCode::kBusy);
  REQUIRE(h.fs.Write(unnamed, *open, first, std::span(frame_a).subspan(first)).ok());  // its continuation
  Result<Bytes> got = h.ReadBlock(a);
  REQUIRE(got.ok());
  CHECK(got.value() == payload_a);
  CHECK(ReplyToEntry(h.fs.Lookup(kRoot, ns, FsHarness::BlockName(b))).negative);
  REQUIRE(h.fs.Write(unnamed, *open, 0, frame_b).ok());  // once committed, the next frame
  h.fs.Release(*open);
  CHECK(h.ReadBlock(b).ok());
}

// Review of stop 44: a frame has no lookup before it (a `.part` rename's ESTALE comes from the
// kernel's lookup of the name), so a frame for a block fenced less than a lease ago started a
// new fill at once and took the address from the fenced writer (adr/0006: ESTALE for a lease).
TEST_CASE("Filesystem frame: a frame for a block fenced less than a lease ago is ESTALE") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  h.WritePart(id, Payload(10));
  REQUIRE(h.store.Fence().ok());
  auto open = OpenChannel(h, kWriter);
  CHECK(h.fs.Write(kWriter, *open, 0, Frame(id, EncodePhysicalKey(id), Payload(16))).status() ==
        StatusCode::kFenced);
  h.fs.Release(*open);
  CHECK(ReplyToEntry(h.fs.Lookup(kWriter, h.Namespace(id), FsHarness::BlockName(id))).negative);
}

// Review (2026-12-07): a frame's tenant was checked once, when its header came. A uid removed
// from the tenant by a reload (or the tenant itself) still committed the frames it had started,
// with payloads chosen after it lost access; a `.part` is refused at its rename.
TEST_CASE("Filesystem frame: a writer that left its tenant since the header commits nothing") {
  for (bool tenant_removed : {false, true}) {
    CAPTURE(tenant_removed);
    FsHarness h;
    CacheIdentity id = SampleIdentity("acme");
    const uint64_t ns = h.Namespace(id);
    const Bytes frame = Frame(id, EncodePhysicalKey(id), Payload(8192));
    const size_t first = frame.size() - 4096;
    auto open = OpenChannel(h, kWriter);
    REQUIRE(h.fs.Write(kWriter, *open, 0, std::span(frame).first(first)).ok());
    std::string text = FsConfigText("daemon");
    const std::string acme = "[tenants.acme]\nuids = [0, 1000]\ngids = [3000]\n";
    REQUIRE(text.find(acme) != std::string::npos);
    text.replace(text.find(acme), acme.size(), tenant_removed ? "" : "[tenants.acme]\nuids = [0]\n");
    h.fs.Reload(ParseConfig(text, "filesystem_test.toml"));
    CHECK(h.fs.Write(kWriter, *open, first, std::span(frame).subspan(first)).status() ==
          (tenant_removed ? StatusCode::kNotFound : StatusCode::kAccessDenied));
    h.fs.Release(*open);
    CHECK(h.store.Stats().tenants["acme"].commits == 0);
    if (tenant_removed) continue;
    CHECK(ReplyToEntry(h.fs.Lookup(kRoot, ns, FsHarness::BlockName(id))).negative);
    // Its fill was given back: a member still in the tenant commits the block.
    auto root_open = OpenChannel(h, kRoot);
    CHECK(h.fs.Write(kRoot, *root_open, 0, frame).ok());
    h.fs.Release(*root_open);
    CHECK_FALSE(ReplyToEntry(h.fs.Lookup(kRoot, ns, FsHarness::BlockName(id))).negative);
  }
}

// Review (2026-12-07): writes to one open run in parallel (parallel direct writes). A second
// thread's frame at offset 0 dropped the first thread's frame, whose later writes then went
// into the second's at the right offset: a block of both payloads was committed, and the first
// thread was told its frame was. A frame belongs to the thread that wrote its header.
TEST_CASE("Filesystem frame: another thread's writes neither restart nor continue a frame in progress") {
  FsHarness h;
  CacheIdentity a = SampleIdentity("acme", 1), b = SampleIdentity("acme", 2);
  const uint64_t ns = h.Namespace(a);
  const Bytes payload_a = Payload(8192, 'A'), payload_b = Payload(8192, 'B');
  const Bytes frame_a = Frame(a, EncodePhysicalKey(a), payload_a), frame_b = Frame(b, EncodePhysicalKey(b), payload_b);
  Principal thread_a = kWriter, thread_b = kWriter;
  thread_a.thread = 101;
  thread_b.thread = 102;
  auto open = OpenChannel(h, kWriter);
  const size_t first = frame_a.size() - 4096;
  REQUIRE(h.fs.Write(thread_a, *open, 0, std::span(frame_a).first(first)).ok());
  CHECK(h.fs.Write(thread_b, *open, 0, frame_b).status() == StatusCode::kBusy);
  CHECK(h.fs.Write(thread_b, *open, first, std::span(payload_b).last(4096)).status() == StatusCode::kBusy);
  Result<size_t> rest = h.fs.Write(thread_a, *open, first, std::span(frame_a).subspan(first));
  REQUIRE(rest.ok());
  CHECK(rest.value() == 4096);
  Result<Bytes> got = h.ReadBlock(a);
  REQUIRE(got.ok());
  CHECK(got.value() == payload_a);
  CHECK(ReplyToEntry(h.fs.Lookup(kRoot, ns, FsHarness::BlockName(b))).negative);
  // Once the frame is committed (or failed), any thread of the opener starts the next one.
  REQUIRE(h.fs.Write(thread_b, *open, 0, frame_b).ok());
  h.fs.Release(*open);
  got = h.ReadBlock(b);
  REQUIRE(got.ok());
  CHECK(got.value() == payload_b);
}

// Review (2026-12-07): a fill the daemon writes itself was its owner's `.part` too. A cold
// refill's caller reopened the `.part` while the download ran and wrote into it, and the refill
// committed those bytes and answered "hit"; a frame's `.part` renamed by its writer committed
// the bytes received so far. Neither may be reached through the mount (ReserveForDaemon).
TEST_CASE("Filesystem frame: the fill of a frame in progress cannot be opened, renamed or unlinked as a .part") {
  FsHarness h;
  CacheIdentity id = SampleIdentity("acme");
  const uint64_t ns = h.Namespace(id);
  const Bytes payload = Payload(8192);
  const Bytes frame = Frame(id, EncodePhysicalKey(id), payload);
  const size_t first = frame.size() - 4096;
  auto open = OpenChannel(h, kWriter);
  REQUIRE(h.fs.Write(kWriter, *open, 0, std::span(frame).first(first)).ok());
  Reply part = ReplyToEntry(h.fs.Lookup(kWriter, ns, FsHarness::PartName(id)));
  REQUIRE(part.err == 0);
  for (const Principal& c : {kWriter, kRoot}) {  // its writer, and an admin
    CHECK(h.fs.Open(c, part.ino, O_WRONLY).status() == StatusCode::kBusy);
    CHECK(h.fs.Rename(c, ns, FsHarness::PartName(id), ns, FsHarness::BlockName(id), 0) == StatusCode::kBusy);
    CHECK(h.fs.Unlink(c, ns, FsHarness::PartName(id)) == StatusCode::kBusy);
  }
  CHECK(ReplyToEntry(h.fs.Lookup(kRoot, ns, FsHarness::BlockName(id))).negative);
  REQUIRE(h.fs.Write(kWriter, *open, first, std::span(frame).subspan(first)).ok());
  h.fs.Release(*open);
  Result<Bytes> got = h.ReadBlock(id);
  REQUIRE(got.ok());
  CHECK(got.value() == payload);
}

}  // namespace
}  // namespace gpucache
