// libFuzzer: the INDEX snapshot decoder and the journal replay (both read files a crash may
// have torn or anyone with access to the data directory may have planted). An input is tried
// as it is and, so that the fuzzer gets past the checksums, with them recomputed: the
// snapshot's trailing sum, and every journal record's.
// Properties: an accepted snapshot re-encodes to exactly its bytes; the replay takes exactly the
// records DecodeJournal finds, the same when fed in two pieces, each re-encoding to its bytes;
// and the entry table it builds agrees with applying those records one by one to a map.
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "store/index_journal.h"
#include "store/index_snapshot.h"

namespace {

using gpucache::Bytes;

void PutLe(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The input with its trailing XXH3-64 made right.
Bytes WithSnapshotSum(Bytes b) {
  if (b.size() < 8) return b;
  PutLe(b.data() + b.size() - 8, XXH3_64bits(b.data(), b.size() - 8), 8);
  return b;
}

// The input with each record's sum made right, as far as the lengths lead.
Bytes WithRecordSums(Bytes b) {
  for (size_t at = 0; b.size() - at >= 4 + 8;) {
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) length |= uint32_t{b[at + i]} << (8 * i);
    if (length < 8 || length > b.size() - at - 4) break;
    PutLe(b.data() + at + 4 + length - 8, XXH3_64bits(b.data() + at + 4, length - 8), 8);
    at += 4 + length;
  }
  return b;
}

void CheckSnapshot(const Bytes& in) {
  auto s = gpucache::DecodeSnapshot(in);
  if (!s) return;
  // An older version that is still read is written back as the current one: the input comes
  // back byte for byte only when it is already current; either way, what is written reads back
  // to the same bytes again.
  Bytes written = gpucache::EncodeSnapshot(*s);
  auto again = gpucache::DecodeSnapshot(written);
  if (!again || gpucache::EncodeSnapshot(*again) != written) std::abort();
  bool current = in.size() >= 8 && written.size() >= 8 && std::memcmp(in.data() + 4, written.data() + 4, 4) == 0;
  if (current && written != in) std::abort();
  for (const auto& e : s->entries) {
    if (e.ns >= s->namespaces.size()) std::abort();
  }
}

void CheckJournal(const Bytes& in, size_t cut) {
  std::vector<gpucache::JournalRecord> records = gpucache::DecodeJournal(in);
  size_t at = 0;
  for (const auto& r : records) {
    Bytes again = gpucache::EncodeJournalRecord(r);
    if (again.size() > in.size() - at || std::memcmp(again.data(), in.data() + at, again.size()) != 0) {
      std::abort();
    }
    at += again.size();
  }
  // Fed whole, then in two pieces (a record cut by the first is taken with the second).
  gpucache::IndexSnapshot whole;
  gpucache::JournalReplay one(whole);
  if (one.Add(in) != at || one.records() != records.size()) std::abort();
  gpucache::IndexSnapshot split;
  gpucache::JournalReplay two(split);
  cut = std::min(cut, in.size());
  size_t used = two.Add({in.data(), cut});
  used += two.Add({in.data() + used, in.size() - used});
  if (used != at || two.records() != records.size()) std::abort();
  gpucache::EntryTable table = one.Finish();
  // The model: the records applied one by one.
  std::map<std::pair<std::string, gpucache::BlockDigest>, gpucache::SnapshotEntry> model;
  for (const auto& r : records) {
    if (r.removal) {
      model.erase({r.ns, r.entry.block});
    } else {
      model[{r.ns, r.entry.block}] = r.entry;
    }
  }
  if (table.live() != model.size()) std::abort();
  table.ForEachLive(whole.entries, [&](uint32_t i) {
    gpucache::SnapshotEntry e = whole.entries.at(i);
    auto it = model.find({whole.namespaces.at(e.ns), e.block});
    if (it == model.end()) std::abort();
    e.ns = it->second.ns;  // a record's entry.ns is not used
    if (!(e == it->second)) std::abort();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, data + size);
  size_t cut = size == 0 ? 0 : data[0] * size / 256;
  CheckSnapshot(in);
  CheckSnapshot(WithSnapshotSum(in));
  CheckJournal(in, cut);
  CheckJournal(WithRecordSums(in), cut);
  return 0;
}
