// libFuzzer: the commit channel (fs/filesystem_commit.cc, adr/0022), as a member of tenant acme
// (uid 1000, not an admin) would write frames through one open of `.gpucache/commit`.
//
// Input: byte 0 says how the rest is written: its low bit picks raw frames (the rest as it is)
// or a valid frame header for an acme block followed by the rest as its payload, with the byte at
// position input[1] / 2 of the whole frame flipped when input[1] is odd; its high bits pick the
// size of the writes (64 bytes to 8 KiB, or all at once; a header cut across writes is refused). A write whose offset the fuzzer takes from the
// frame's own progress, with every 7th restarting at offset 0, covers new frames after old ones.
//
// Properties: nothing crashes; once the open is released no fill is left in any tenant; no
// block appears in globex, which the writer is not a member of.
#include <fcntl.h>

#include <cstdlib>

#include "common/commit_frame.h"
#include "fs/filesystem.h"
#include "store/memory_store.h"
#include "tests/support/sample_identity.h"

namespace {

using namespace gpucache;

const Principal kAcmeWriter{1000, 1000, nullptr};

Bytes ValidFrame(std::span<const uint8_t> payload) {
  static const CacheIdentity id = test::SampleIdentity("acme", 4);
  Bytes frame = commit_frame::EncodeHeader(AddressOf(id).RelativePath(), EncodePhysicalKey(id), payload.size());
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

uint64_t Held(StoreStats stats, const std::string& tenant, bool reservations) {
  const Usage& u = stats.tenants[tenant].usage;
  return reservations ? u.reservations : u.blocks;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static Config config = ParseConfig(
      "[admins]\nuids = [0]\n[tenants.acme]\nuids = [1000]\n[tenants.globex]\nuids = [2000]\n", "fuzz");
  MemoryStore store;
  for (const char* tenant : {"acme", "globex"}) {
    BlockAddress a = AddressOf(test::SampleIdentity(tenant, 4));
    store.CreateNamespace(a.tenant, a.ns, Owner{0, 0});
  }
  Filesystem fs(config, store);
  Result<OpenReply> open = fs.Open(kAcmeWriter, kCommitIno, O_WRONLY);
  if (!open.ok()) std::abort();
  Handle& h = *open->handle;

  const uint8_t how = data[0];
  std::span<const uint8_t> rest(data + 1, size - 1);
  Bytes frame = (how & 1) ? ValidFrame(rest.subspan(1)) : Bytes(rest.begin(), rest.end());
  if ((how & 1) && (rest[0] & 1) && rest[0] / 2 < frame.size()) frame[rest[0] / 2] ^= 0x5a;
  const size_t piece = (how >> 1) == 0 ? frame.size() : static_cast<size_t>(how >> 1) * 64;
  uint64_t offset = 0;
  for (size_t at = 0, n = 0; at < frame.size(); at += piece, ++n) {
    std::span<const uint8_t> bytes(frame.data() + at, std::min(piece, frame.size() - at));
    if (n % 7 == 6) offset = 0;
    Result<size_t> w = fs.Write(kAcmeWriter, h, offset, bytes);
    if (w.ok() && w.value() != bytes.size()) std::abort();  // all or nothing per write
    offset += bytes.size();
  }
  fs.Release(h);
  StoreStats stats = store.Stats();
  if (Held(stats, "acme", true) != 0 || Held(stats, "globex", true) != 0) std::abort();
  if (Held(stats, "globex", false) != 0) std::abort();
  return 0;
}
