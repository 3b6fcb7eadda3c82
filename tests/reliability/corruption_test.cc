// Corruption through a real mount. Blocks are committed through the mount, then their backing
// files are damaged behind the daemon's back (bit flips, zeroed ranges, truncation, extension,
// another block's file copied over the name), with the daemon running or stopped. What the
// product promises (docs/block-format.md, docs/architecture.md) and what is checked here:
//
//   - no wrong byte ever reaches a reader: every byte read is compared with what was committed;
//   - damage to the header (or the file's length, or its identity) is found at open (EIO) by a
//     running daemon, and at start-up by a restarted one (the file is deleted: ENOENT);
//   - damage to the payload is found on read (EIO), chunk by chunk;
//   - damage that touches no checksummed byte (the zero padding between the header and the
//     payload) changes nothing a reader sees: the block reads back identical;
//   - each detection counts exactly one checksum failure, and the next lookup is a clean miss.
//
// The kernel page cache: committed blocks are opened with keep_cache, so a page read once is
// served again without asking the daemon. The product promises that every byte served was
// verified by the daemon at least once, not that later disk damage is noticed while the pages
// are cached. The batch tests corrupt before the first read (commits write with direct_io, so
// nothing is cached); the last test reads first, then corrupts, and checks exactly that promise.
#include <cstdio>
#include <map>

#include "store/block_file.h"
#include "tests/reliability/reliability_helpers.h"

namespace gpucache {
namespace {

using namespace test;

// What damage to a block file must lead to.
enum class Effect {
  kNone,     // no checksummed byte changed: reads back identical
  kHeader,   // header, length or identity: EIO at open (running), ENOENT (after a restart)
  kPayload,  // payload only: EIO on read
};

const char* EffectName(Effect e) {
  return e == Effect::kNone ? "none" : e == Effect::kHeader ? "header" : "payload";
}

struct FileLayout {
  uint64_t header_length = 0;
  uint64_t data_offset = 0;
  uint64_t size = 0;  // of the whole file
};

FileLayout LayoutOf(const std::string& backing) {
  Bytes head = ReadFileBytes(backing);
  FileLayout l;
  l.size = head.size();
  l.header_length = HeaderLengthFromPrefix(head);
  auto h = DecodeBlockHeader(head, head.size());
  REQUIRE_MESSAGE(h.ok(), "a freshly committed block file does not parse: " << backing);
  l.data_offset = h->data_offset;
  return l;
}

// Which effect changing bytes [off, off+len) from `before` to `after` has.
Effect EffectOfChange(const FileLayout& l, uint64_t off, const Bytes& before, const Bytes& after) {
  Effect e = Effect::kNone;
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] == after[i]) continue;
    uint64_t at = off + i;
    if (at < l.header_length) return Effect::kHeader;
    if (at >= l.data_offset) e = Effect::kPayload;
  }
  return e;
}

Bytes PreadBytes(int fd, uint64_t off, size_t len) {
  Bytes b(len);
  ssize_t n = ::pread(fd, b.data(), len, static_cast<off_t>(off));
  b.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return b;
}

// One committed block and what was done to it.
struct Victim {
  CacheIdentity id;
  Bytes payload;
  Effect expect = Effect::kNone;
  std::string what;     // the damage, for failure messages
  bool counted = true;  // false: an undamaged bystander, checked but not tallied
};

struct Tally {
  size_t cases = 0, eio = 0, enoent = 0, identical = 0, wrong_bytes = 0;
  std::map<std::string, size_t> by_effect;
};

// Reads every victim through the mount and checks it against its expected effect. `restarted`:
// the damage was done while the daemon was stopped. Then checks that every detected block is a
// clean miss and that the checksum-failure counter grew by exactly the EIOs seen.
void VerifyBatch(MountedFs& m, const std::vector<Victim>& victims, bool restarted, Tally& t) {
  MountClient client(m.mnt());
  uint64_t failures_before = Counter(m, "checksum_failures");
  size_t eio = 0;
  std::vector<const Victim*> detected;
  for (const Victim& v : victims) {
    ReadOutcome r = ReadWhole(client.PathOf(v.id));
    size_t wrong = WrongBytes(r.got, v.payload);
    t.wrong_bytes += wrong;
    if (v.counted) {
      t.cases++;
      t.by_effect[EffectName(v.expect)]++;
      if (r.err == 0 && r.got == v.payload) t.identical++;
    }
    CAPTURE(v.what);
    std::string effect = EffectName(v.expect);
    CAPTURE(effect);
    CAPTURE(r.err);
    CAPTURE(r.at_open);
    size_t got = r.got.size();
    CAPTURE(got);
    CHECK(wrong == 0);
    switch (v.expect) {
      case Effect::kNone:
        CHECK(r.err == 0);
        CHECK(r.got.size() == v.payload.size());
        break;
      case Effect::kHeader:
        CHECK(r.at_open);
        CHECK(r.err == (restarted ? ENOENT : EIO));
        break;
      case Effect::kPayload:
        CHECK_FALSE(r.at_open);
        CHECK(r.err == EIO);
        break;
    }
    if (r.err == EIO) eio++;
    if (r.err == ENOENT) t.enoent++;
    if (r.err != 0) detected.push_back(&v);
  }
  t.eio += eio;
  // Every detection counted once, and nothing else counted.
  CHECK(Counter(m, "checksum_failures") - failures_before == eio);
  for (const Victim* v : detected) {
    CAPTURE(v->what);
    CHECK(WaitForMiss(client.PathOf(v->id)) == ENOENT);
    CHECK(LookupResultOf(m, v->id) == "miss");
    CHECK(StatErrno(BackingPath(m, v->id)) == ENOENT);  // the bad file is gone from disk
  }
  // Clean up the survivors so the next batch starts from an empty store.
  for (const Victim& v : victims) {
    if (v.expect == Effect::kNone) CHECK(::unlink(client.PathOf(v.id).c_str()) == 0);
  }
}

void FlipBit(const std::string& path, uint64_t bit) {
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  uint8_t b = 0;
  REQUIRE(::pread(fd, &b, 1, static_cast<off_t>(bit / 8)) == 1);
  b ^= static_cast<uint8_t>(1u << (bit % 8));
  REQUIRE(::pwrite(fd, &b, 1, static_cast<off_t>(bit / 8)) == 1);
  ::close(fd);
}

constexpr const char* kWalkDone = "block files checked in the background";

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

uint64_t LastReloadCount(const std::string& log, const std::string& what) {
  // "... epoch E, L blocks loaded, S skipped, ..."
  size_t at = log.rfind(" " + what);
  if (at == std::string::npos) return ~0ull;
  size_t start = log.rfind(' ', at - 1);
  return std::strtoull(log.c_str() + start + 1, nullptr, 10);
}

TEST_CASE("Reliability corruption: every single-bit flip of small block files through the mount") {
  MountedFs m;
  MountClient client(m.mnt());
  uint64_t next_block = 1;
  // Two shapes: a one-chunk block, where every bit of the header and of the payload is flipped,
  // and a two-chunk block, where every bit of the chunk table, whole-payload digest and header
  // seal is flipped, and every bit of the first and last 16 bytes of each chunk. In both, 256
  // random bits of the padding (covered by no checksum, never served) are flipped too.
  struct Shape {
    size_t payload;
    std::vector<uint64_t> bits;
  };
  std::vector<Shape> shapes = {{100, {}}, {64 * 1024 + 100, {}}};
  Rng rng(TestSeed());
  for (Shape& s : shapes) {
    CacheIdentity probe = RelBlock(next_block++);
    REQUIRE(client.Commit(probe, SeededPayload(0, s.payload)) == 0);
    FileLayout l = LayoutOf(BackingPath(m, probe));
    REQUIRE(::unlink(client.PathOf(probe).c_str()) == 0);
    uint64_t chunks = (s.payload + kDefaultChunkSize - 1) / kDefaultChunkSize;
    uint64_t header_from = chunks == 1 ? 0 : l.header_length - chunks * 8 - 16 - 8;
    for (uint64_t bit = header_from * 8; bit < l.header_length * 8; ++bit) s.bits.push_back(bit);
    std::vector<std::pair<uint64_t, uint64_t>> data_ranges;  // [from, to) in payload bytes
    if (chunks == 1) {
      data_ranges.push_back({0, s.payload});
    } else {
      for (uint64_t c = 0; c < chunks; ++c) {
        uint64_t from = c * kDefaultChunkSize,
                 to = std::min<uint64_t>(s.payload, from + kDefaultChunkSize);
        data_ranges.push_back({from, from + 16});
        data_ranges.push_back({to - 16, to});
      }
    }
    for (auto [from, to] : data_ranges) {
      for (uint64_t bit = (l.data_offset + from) * 8; bit < (l.data_offset + to) * 8; ++bit) {
        s.bits.push_back(bit);
      }
    }
    for (int i = 0; i < 256; ++i)
      s.bits.push_back(rng.Range(l.header_length * 8, l.data_offset * 8 - 1));
  }

  Tally t;
  size_t header_bits = 0, payload_bits = 0, padding_bits = 0;
  auto t0 = Clock::now();
  constexpr size_t kBatch = 400;
  for (const Shape& s : shapes) {
    FileLayout l;
    for (size_t from = 0; from < s.bits.size(); from += kBatch) {
      std::vector<Victim> batch;
      for (size_t i = from; i < std::min(s.bits.size(), from + kBatch); ++i) {
        Victim v{RelBlock(next_block), SeededPayload(next_block, s.payload)};
        ++next_block;
        REQUIRE(client.Commit(v.id, v.payload) == 0);
        uint64_t bit = s.bits[i];
        if (l.size == 0) l = LayoutOf(BackingPath(m, v.id));
        uint64_t byte = bit / 8;
        v.expect = byte < l.header_length ? Effect::kHeader
                   : byte < l.data_offset ? Effect::kNone
                                          : Effect::kPayload;
        (v.expect == Effect::kHeader ? header_bits
         : v.expect == Effect::kNone ? padding_bits
                                     : payload_bits)++;
        v.what = "payload " + std::to_string(s.payload) + " bytes, bit " + std::to_string(bit) +
                 " (byte " + std::to_string(byte) + ")";
        FlipBit(BackingPath(m, v.id), bit);
        batch.push_back(std::move(v));
      }
      VerifyBatch(m, batch, false, t);
    }
  }
  std::printf(
      "corruption: single-bit flips=%zu (header=%zu payload=%zu padding=%zu) detected=%zu "
      "harmless=%zu wrong_bytes=%zu in %.1fs\n",
      t.cases, header_bits, payload_bits, padding_bits, t.eio, t.identical, t.wrong_bytes,
      SecondsSince(t0));
  CHECK(t.wrong_bytes == 0);
  CHECK(t.eio == header_bits + payload_bits);  // every checksummed bit is caught
  CHECK(t.identical == padding_bits);
}

// One random damage to a committed block file. `donor` is the file of another committed block
// of the same size (for a copy over this one's name).
Effect Damage(const std::string& path, const std::string& donor, Rng& rng, std::string& what) {
  FileLayout l = LayoutOf(path);
  uint64_t kind = rng.Below(20);
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  Effect e;
  if (kind < 8) {  // 40%: one bit anywhere in the file
    uint64_t bit = rng.Below(l.size * 8);
    ::close(fd);
    FlipBit(path, bit);
    what = "flip bit " + std::to_string(bit);
    uint64_t byte = bit / 8;
    return byte < l.header_length ? Effect::kHeader
           : byte < l.data_offset ? Effect::kNone
                                  : Effect::kPayload;
  } else if (kind < 13) {  // 25%: a zeroed range anywhere, 1 byte to 64 KiB
    uint64_t off = rng.Below(l.size);
    uint64_t len = std::min<uint64_t>(l.size - off, rng.Range(1, 64 * 1024));
    Bytes before = PreadBytes(fd, off, len), zeros(len, 0);
    REQUIRE(::pwrite(fd, zeros.data(), len, static_cast<off_t>(off)) == static_cast<ssize_t>(len));
    what = "zero [" + std::to_string(off) + ", +" + std::to_string(len) + ")";
    e = EffectOfChange(l, off, before, zeros);
  } else if (kind < 17) {  // 20%: truncated anywhere
    uint64_t to = rng.Below(l.size);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(to)) == 0);
    what = "truncate to " + std::to_string(to);
    e = Effect::kHeader;   // the length no longer agrees with the header
  } else if (kind < 18) {  // 5%: extended by garbage
    Bytes extra = SeededPayload(rng.Next(), rng.Range(1, 4096));
    REQUIRE(::pwrite(fd, extra.data(), extra.size(), static_cast<off_t>(l.size)) ==
            static_cast<ssize_t>(extra.size()));
    what = "extend by " + std::to_string(extra.size());
    e = Effect::kHeader;
  } else {  // 10%: another block's file copied over this one's name
    Bytes other = ReadFileBytes(donor);
    REQUIRE(other.size() == l.size);
    ::close(fd);
    REQUIRE(WriteFileBytes(path + ".tmp-copy", other));
    REQUIRE(::rename((path + ".tmp-copy").c_str(), path.c_str()) == 0);
    what = "copy of another block's file";
    return Effect::kHeader;  // its identity is not this path's
  }
  ::close(fd);
  return e;
}

TEST_CASE("Reliability corruption: 1000 random damages to 1 MiB blocks live and across restarts") {
  uint64_t seed = TestSeed();
  INFO("GPUCACHE_SEED=" << seed);
  std::printf("corruption: random damages seed=%llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  MountedFs m;
  MountClient client(m.mnt());
  constexpr size_t kDamages = 1000, kBatch = 100, kSize = 1 << 20;
  uint64_t next_block = 1000000;
  Tally live, offline;
  size_t reload_skipped = 0;
  auto t0 = Clock::now();
  for (size_t done = 0, batch_no = 0; done < kDamages; done += kBatch, ++batch_no) {
    bool restart = batch_no % 2 == 1;  // odd batches: damaged while the daemon is stopped
    // A pristine donor for copies, verified intact at the end of the batch.
    Victim donor{RelBlock(next_block), SeededPayload(next_block, kSize), Effect::kNone, "donor",
                 false};
    ++next_block;
    REQUIRE(client.Commit(donor.id, donor.payload) == 0);
    std::vector<Victim> batch;
    for (size_t i = 0; i < kBatch; ++i) {
      Victim v{RelBlock(next_block), SeededPayload(next_block, kSize)};
      ++next_block;
      REQUIRE(client.Commit(v.id, v.payload) == 0);
      batch.push_back(std::move(v));
    }
    if (restart) REQUIRE(m.Stop() == 0);
    size_t header_damaged = 0;
    for (Victim& v : batch) {
      v.expect = Damage(BackingPath(m, v.id), BackingPath(m, donor.id), rng, v.what);
      header_damaged += v.expect == Effect::kHeader;
    }
    if (restart) {
      size_t walks = CountOf(m.Log(), kWalkDone);
      m.Start();
      // The start checks the files after mounting (adr/0016): its counts are final in the
      // line the background walk logs when it finished.
      for (int i = 0; i < 60000 && CountOf(m.Log(), kWalkDone) == walks; ++i) ::usleep(1000);
      REQUIRE(CountOf(m.Log(), kWalkDone) == walks + 1);
      // Start-up refused exactly the files whose header, length or identity is wrong.
      CHECK(LastReloadCount(m.Log(), "skipped,") == header_damaged);
      CHECK(LastReloadCount(m.Log(), "blocks loaded,") == kBatch + 1 - header_damaged);
      reload_skipped += header_damaged;
    }
    batch.push_back(std::move(donor));
    VerifyBatch(m, batch, restart, restart ? offline : live);
  }
  std::printf(
      "corruption: random 1MiB damages=%zu live(detected_eio=%zu harmless=%zu) "
      "restarted(detected_eio=%zu skipped_at_start=%zu harmless=%zu) wrong_bytes=%zu in %.1fs\n",
      live.cases + offline.cases, live.eio, live.identical, offline.eio, reload_skipped,
      offline.identical, live.wrong_bytes + offline.wrong_bytes, SecondsSince(t0));
  CHECK(live.cases + offline.cases == kDamages);
  CHECK(live.wrong_bytes + offline.wrong_bytes == 0);
  CHECK(live.eio == live.by_effect["header"] + live.by_effect["payload"]);
  CHECK(offline.eio == offline.by_effect["payload"]);
  CHECK(offline.enoent == offline.by_effect["header"]);
}

// Read first (the kernel keeps the verified pages), then damage the file: what a reader gets is
// either the verified bytes from the page cache or an error, never the damaged bytes. After a
// restart (a new mount: no cached pages) the damage is found.
TEST_CASE(
    "Reliability corruption: damage after a read is never served and is found after a restart") {
  MountedFs m;
  MountClient client(m.mnt());
  constexpr size_t kBlocks = 16, kSize = (1 << 20) + 4321;
  std::vector<Victim> victims;
  for (size_t i = 0; i < kBlocks; ++i) {
    Victim v{RelBlock(5000000 + i), SeededPayload(5000000 + i, kSize)};
    REQUIRE(client.Commit(v.id, v.payload) == 0);
    ReadOutcome warm = ReadWhole(client.PathOf(v.id));
    REQUIRE(warm.err == 0);
    REQUIRE(warm.got == v.payload);
    victims.push_back(std::move(v));
  }
  size_t from_cache = 0, eio = 0, wrong = 0;
  uint64_t failures_before = Counter(m, "checksum_failures");
  for (size_t i = 0; i < kBlocks; ++i) {
    Victim& v = victims[i];
    std::string path = BackingPath(m, v.id);
    FileLayout l = LayoutOf(path);
    bool header = i % 4 == 0;  // a quarter in the header, the rest in the payload
    FlipBit(path, header ? 8 * 40 + (i % 8) : (l.data_offset + 3 * 65536 + 1000 * i) * 8 + (i % 8));
    v.expect = header ? Effect::kHeader : Effect::kPayload;
    ReadOutcome r = ReadWhole(client.PathOf(v.id));
    wrong += WrongBytes(r.got, v.payload);
    if (r.err == 0 && r.got == v.payload) from_cache++;
    if (r.err == EIO) eio++;
    CAPTURE(i);
    CHECK((r.err == 0 || r.err == EIO));
    // The header is read again at every open: damage there is found even with pages cached.
    if (header) CHECK(r.err == EIO);
  }
  CHECK(Counter(m, "checksum_failures") - failures_before == eio);
  CHECK(wrong == 0);
  // A restart: a new mount with no cached pages, and a fresh index from the disk.
  REQUIRE(m.Stop() == 0);
  m.Start();
  size_t found_after_restart = 0;
  for (Victim& v : victims) {
    ReadOutcome r = ReadWhole(client.PathOf(v.id));
    wrong += WrongBytes(r.got, v.payload);
    CHECK(r.err != 0);
    if (r.err != 0) found_after_restart++;
  }
  std::printf(
      "corruption: damaged after a read=%zu served_from_page_cache=%zu eio_at_once=%zu "
      "found_after_restart=%zu wrong_bytes=%zu\n",
      kBlocks, from_cache, eio, found_after_restart, wrong);
  CHECK(wrong == 0);
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

using namespace test;

// Issue 13, defect 8: for a moment after an EIO, a stat of the dropped block could still
// succeed from the kernel's cache (about 8 in 2,700 tries): the entry is now invalidated before
// the EIO is replied. No waiting here: the stat comes right after the failed read, before the
// reader even closes. (This machine never showed the race on 9114653, with or without every
// core busy: the guard is here, the regression could not be reproduced.)
TEST_CASE("Reliability corruption: the stat right after an EIO is already a miss") {
  MountedFs m;
  MountClient client(m.mnt());
  int stale = 0, tries = 0;
  for (uint64_t n = 1; n <= 300; ++n) {
    Victim v{RelBlock(n), SeededPayload(n, 8192), Effect::kPayload, "payload flip", true};
    REQUIRE(client.Commit(v.id, v.payload) == 0);
    std::string path = client.PathOf(v.id);
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);  // the kernel caches the entry and attributes
    FlipBit(BackingPath(m, v.id), (kBlockDataOffset + 100) * 8);
    int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    char buf[8192];
    REQUIRE(Errno(::read(fd, buf, sizeof buf)) == EIO);
    tries++;
    stale += ::stat(path.c_str(), &st) == 0;  // before even closing the reader
    ::close(fd);
  }
  std::printf("stat right after EIO: %d of %d still succeeded\n", stale, tries);
  CHECK(stale == 0);
}

// Regression (review, 2026-12-07): a block file removed outside gpucache (by hand, a cleaner)
// made the open EIO, counted a checksum failure and logged the block as damaged and "deleted".
// It is a miss (ENOENT), named in the log, counted apart, and the restart does not expect it.
TEST_CASE("Reliability corruption: a block file removed outside gpucache is a miss, not a checksum failure") {
  MountedFs m;
  MountClient client(m.mnt());
  const CacheIdentity kept = RelBlock(1), removed = RelBlock(2), stated = RelBlock(3);
  for (const CacheIdentity& id : {kept, removed, stated}) REQUIRE(client.Commit(id, SeededPayload(1, 8192)) == 0);
  REQUIRE(::unlink(BackingPath(m, removed).c_str()) == 0);
  REQUIRE(::unlink(BackingPath(m, stated).c_str()) == 0);
  CHECK(Errno(::open(client.PathOf(removed).c_str(), O_RDONLY)) == ENOENT);
  // A stat of its identity reads the header too.
  char buf[4096];
  CHECK(Errno(::getxattr(client.PathOf(stated).c_str(), "user.gpucache.identity", buf, sizeof buf)) == ENOENT);
  CHECK(StatErrno(client.PathOf(removed)) == ENOENT);
  CHECK(Counter(m, "checksum_failures") == 0);
  CHECK(Metric(m, "gpucache_block_files_missing_total") == 2);
  CHECK(m.Log().find("block file missing: " + AddressOf(removed).RelativePath()) != std::string::npos);
  CHECK(m.Log().find(BackingPath(m, removed)) != std::string::npos);
  CHECK(m.Log().find("checksum mismatch") == std::string::npos);
  REQUIRE(m.Stop() == 0);
  m.Start();
  auto got = ReadWhole(client.PathOf(kept));
  CHECK(got.err == 0);
  CHECK(StatErrno(client.PathOf(removed)) == ENOENT);
}

}  // namespace
}  // namespace gpucache
