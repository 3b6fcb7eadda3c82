// Helpers the verify-after-start tests share (verify_after_start_test.cc, verify_damage_test.cc):
// blocks by number, a start with its walk held, and a data directory damaged while "down".
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <latch>
#include <set>
#include <string>

#include "store/file_store.h"
#include "tests/support/sample_identity.h"
#include "tests/support/temp_dir.h"

namespace gpucache::verify_test {

namespace fs = std::filesystem;
inline constexpr Owner kOwner{1000, 1000};

inline CacheIdentity Key(int k) {
  CacheIdentity id = test::SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(k));
  return id;
}
inline Bytes PayloadOf(int k) { return test::Payload(5000 + k, static_cast<uint8_t>(k)); }
inline Bytes OtherPayloadOf(int k) { return test::Payload(7000 + k, static_cast<uint8_t>(k + 100)); }

inline bool Committed(IndexedStore& s, int k, const Bytes& payload) {
  BlockAddress a = AddressOf(Key(k));
  s.CreateNamespace(a.tenant, a.ns, kOwner);
  auto r = s.Reserve(a, kOwner);
  return r.ok() && s.SetIdentity(r.value(), EncodePhysicalKey(Key(k))) == StatusCode::kOk &&
         s.Write(r.value(), 0, payload).ok() && s.Commit(r.value()) == StatusCode::kOk;
}
inline void Commit(IndexedStore& s, int k, const Bytes& payload) { REQUIRE(Committed(s, k, payload)); }

inline std::unique_ptr<IndexedStore> Open(const std::string& dir, StoreOptions options,
                                   FileStoreReport* report = nullptr) {
  std::string error;
  FileStoreReport local;
  auto s = OpenFileStore(dir, std::move(options), report ? report : &local, &error);
  REQUIRE_MESSAGE(s, error);
  return s;
}

inline std::string PathOf(const std::string& dir, int k) {
  return dir + "/blocks/" + AddressOf(Key(k)).RelativePath();
}

inline Bytes ReadAll(IndexedStore& s, int k) {
  auto r = s.Open(AddressOf(Key(k)));
  if (!r.ok()) return {};
  Bytes out(r.value()->info().size);
  auto n = r.value()->Read(0, out);
  return n.ok() ? out : Bytes{};
}

// Blocks 0..7 committed and closed cleanly (INDEX names them all), then, while "down":
//   0 deleted; 1 truncated; 2 another block's file copied over it (a header naming another
//   address); 3 replaced by a valid file of the same block with other bytes (committed in
//   `other`); 4 a header byte damaged in place; 5..7 untouched; 9 a valid file INDEX never
//   named (from `other`); and a file whose name is not a block's.
inline void MakeDamagedStart(const std::string& dir, const std::string& other, bool clean_close = true) {
  if (clean_close) {
    auto s = Open(dir, {});
    for (int k = 0; k < 8; k++) Commit(*s, k, PayloadOf(k));
  } else {
    // A process that dies without closing: INDEX from its start, the commits in the journal.
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::string error;
      auto s = OpenFileStore(dir, {}, nullptr, &error);
      for (int k = 0; s && k < 8; k++) {
        if (!Committed(*s, k, PayloadOf(k))) ::_exit(1);
      }
      ::_exit(s ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  {
    auto o = Open(other, {});
    Commit(*o, 3, OtherPayloadOf(3));
    Commit(*o, 9, OtherPayloadOf(9));
  }
  fs::remove(PathOf(dir, 0));
  fs::resize_file(PathOf(dir, 1), 100);
  fs::copy_file(PathOf(dir, 6), PathOf(dir, 2), fs::copy_options::overwrite_existing);
  fs::copy_file(PathOf(other, 3), PathOf(dir, 3), fs::copy_options::overwrite_existing);
  {
    FILE* f = std::fopen(PathOf(dir, 4).c_str(), "r+b");
    REQUIRE(f);
    std::fseek(f, 40, SEEK_SET);
    std::fputc('X', f);
    std::fclose(f);
  }
  fs::copy_file(PathOf(other, 9), PathOf(dir, 9));
  std::string ns_dir = fs::path(PathOf(dir, 5)).parent_path().string();
  std::FILE* junk = std::fopen((ns_dir + "/not-a-block").c_str(), "wb");
  REQUIRE(junk);
  std::fclose(junk);
}

// What an answer about block k must be after MakeDamagedStart, eager or not: gone (0, 1, 2, 4),
// the replacing file's block (3), the block as committed (5..7), the file found (9).
inline void CheckAnswersAbout(IndexedStore& s, int k, const std::string& how) {
  CAPTURE(k);
  CAPTURE(how);
  BlockAddress a = AddressOf(Key(k));
  bool gone = k == 0 || k == 1 || k == 2 || k == 4;
  const Bytes want = k == 3 || k == 9 ? OtherPayloadOf(k) : PayloadOf(k);
  if (how == "probe") {
    Result<BlockInfo> p = s.Probe(a);
    CHECK(p.ok() == !gone);
    if (p.ok()) CHECK(p->size == want.size());
  } else if (how == "lookup") {
    CHECK((s.Lookup(Key(k)).kind == LookupResult::Kind::kHit) == !gone);
  } else if (how == "stat_attributes") {
    Result<BlockInfo> st = s.StatAttributes(a);
    CHECK(st.ok() == !gone);
    if (st.ok()) CHECK(st->size == want.size());
  } else if (how == "stat") {
    Result<BlockInfo> st = s.Stat(a);
    CHECK(st.ok() == !gone);
    if (st.ok()) CHECK(st->size == want.size());
  } else if (how == "open") {
    auto r = s.Open(a);
    CHECK(r.ok() == !gone);
    if (r.ok()) {
      CHECK(r.value()->info().size == want.size());
      Bytes out(want.size());
      auto n = r.value()->Read(0, out);
      CHECK(n.ok());
      CHECK(out == want);
    }
  }
}

inline const int kAsked[] = {0, 1, 2, 3, 4, 5, 6, 7, 9};

// The blocks whose files are in <dir>/damaged/ (each named by when it was found, then its block).
inline std::set<std::string> DamagedBlocks(const std::string& dir) {
  std::set<std::string> out;
  if (!fs::exists(dir + "/damaged")) return out;
  for (const auto& e : fs::directory_iterator(dir + "/damaged")) {
    std::string name = e.path().filename().string();
    out.insert(name.substr(name.find('-') + 1));
  }
  return out;
}

// The damaged files after MakeDamagedStart: truncated (1), another block's (2), header hit (4).
inline std::set<std::string> DamagedByMakeDamagedStart() {
  return {AddressOf(Key(1)).block, AddressOf(Key(2)).block, AddressOf(Key(4)).block};
}

// Options of a start that checks files after it opens, its walk held until `release`.
inline StoreOptions HeldWalk(std::latch& release) {
  StoreOptions o;
  o.verify_in_background = true;
  o.before_walk = [&release] { release.wait(); };
  return o;
}


}  // namespace gpucache::verify_test
