// Quarantine and reclaim, fencing, single-flight outcomes and draining, through a real mount.
#include <doctest/doctest.h>
#include <optional>
#include <errno.h>

#include <dirent.h>
#include <sys/syscall.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>
#include <nlohmann/json.hpp>

#include "tests/mount/mount_helpers.h"

namespace gpucache {
namespace {

using namespace test;
using nlohmann::json;

json Ctl(const MountedFs& m, const json& request) {
  return json::parse(Control(m, request.dump()), nullptr, false);
}

std::string Fill(const MountedFs& m, const CacheIdentity& id) {
  std::string name = "user.gpucache.fill." + AddressOf(id).block;
  char buf[64];
  ssize_t n = ::getxattr(NsDir(m, id).c_str(), name.c_str(), buf, sizeof buf);
  return n < 0 ? "errno " + std::to_string(errno) : std::string(buf, n);
}

TEST_CASE("Mount quarantine: unlink while open quarantines, last close does not free, drained reclaims") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  Bytes payload = Payload(200000);
  REQUIRE(client.Commit(id, payload) == 0);
  int fd = ::open(client.PathOf(id).c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::unlink(client.PathOf(id).c_str()) == 0);
  struct stat st;
  CHECK(Errno(::stat(client.PathOf(id).c_str(), &st)) == ENOENT);
  std::string q = ReadText(m.mnt() + "/.gpucache/quarantine");
  CHECK(q.find("path=" + AddressOf(id).RelativePath()) != std::string::npos);
  CHECK(q.find("reason=invalidated") != std::string::npos);
  CHECK(q.find("open_handles=1") != std::string::npos);
  Bytes back(payload.size());
  CHECK(::pread(fd, back.data(), back.size(), 0) == static_cast<ssize_t>(back.size()));
  CHECK(back == payload);  // the holder still reads its bytes
  ::close(fd);
  ::usleep(50000);  // RELEASE is asynchronous
  json list = Ctl(m, {{"op", "quarantine"}});
  REQUIRE(list["quarantine"].size() == 1);  // last close alone does not free it
  uint64_t region = list["quarantine"][0]["region"];
  CHECK(list["quarantine"][0]["open_handles"] == 0);
  // Another tenant can neither see nor reclaim it.
  CHECK(AsUser(2000, 2000, [&] {
          json r = Ctl(m, {{"op", "reclaim"}, {"drained", region}});
          return r["ok"] == false && r["errno"] == "ENOENT" ? 0 : 1;
        }) == 0);
  CHECK(AsUser(2000, 2000, [&] { return ReadText(m.mnt() + "/.gpucache/quarantine").empty() ? 0 : 1; }) == 0);
  // A member of the tenant attests the drain.
  CHECK(AsUser(1000, 1000, [&] { return Ctl(m, {{"op", "reclaim"}, {"drained", region}})["ok"] == true ? 0 : 1; }) == 0);
  CHECK(Ctl(m, {{"op", "quarantine"}})["quarantine"].empty());
  CHECK(ReadText(m.mnt() + "/.gpucache/stats").find(" quarantined_bytes=0 ") != std::string::npos);
}

TEST_CASE("Mount quarantine: admin evict of an open block, then fence and reclaim --fenced") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  REQUIRE(client.Commit(id, Payload(5000)) == 0);
  int fd = ::open(client.PathOf(id).c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  CHECK(AsUser(1000, 1000, [&] {
          return Ctl(m, {{"op", "evict"}, {"path", AddressOf(id).RelativePath()}})["errno"] == "EACCES" ? 0 : 1;
        }) == 0);
  REQUIRE(Ctl(m, {{"op", "evict"}, {"path", AddressOf(id).RelativePath()}})["ok"] == true);
  uint64_t epoch = std::stoull(ReadText(m.mnt() + "/.gpucache/epoch"));
  json early = Ctl(m, {{"op", "reclaim"}, {"fenced", epoch}});
  CHECK(early["reclaimed"] == 0);  // quarantined in this epoch: a fence must come first
  CHECK(AsUser(1000, 1000, [&] { return Ctl(m, {{"op", "fence"}})["errno"] == "EACCES" ? 0 : 1; }) == 0);
  json fenced = Ctl(m, {{"op", "fence"}});
  REQUIRE(fenced["ok"] == true);
  CHECK(fenced["epoch"] == epoch + 1);
  CHECK(Ctl(m, {{"op", "reclaim"}, {"fenced", epoch}})["errno"] == "ESTALE");  // an old epoch
  CHECK(Ctl(m, {{"op", "reclaim"}, {"fenced", epoch + 1}})["reclaimed"] == 1);
  ::close(fd);
}

TEST_CASE("Mount fence: an in-flight writer gets ESTALE on write and on commit") {
  MountedFs m(TestConfig("reservation_lease = 0.5"));
  MountClient client(m.mnt());
  CacheIdentity open_fill = SampleIdentity("acme", 2), closed_fill = SampleIdentity("acme", 3);
  REQUIRE(::mkdir(NsDir(m, open_fill).c_str(), 0770) == 0);
  int fd = ::open((client.PathOf(open_fill) + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "abc", 3) == 3);
  REQUIRE(WritePart(client.PathOf(closed_fill) + ".part", EncodePhysicalKey(closed_fill), Payload(10)) == 0);
  REQUIRE(Ctl(m, {{"op", "fence"}})["ok"] == true);
  CHECK(Errno(::write(fd, "def", 3)) == ESTALE);
  ::close(fd);
  CHECK(Errno(::rename((client.PathOf(closed_fill) + ".part").c_str(), client.PathOf(closed_fill).c_str())) ==
        ESTALE);
  struct stat st;
  CHECK(Errno(::stat(client.PathOf(closed_fill).c_str(), &st)) == ENOENT);  // fenced is not success
  CHECK(Fill(m, closed_fill) == "fenced");
  CHECK(Fill(m, open_fill) == "fenced");
  CHECK(ReadText(m.mnt() + "/.gpucache/stats").find(" reservations=0 ") != std::string::npos);
  // For one lease the fenced name answers ESTALE; then the block is filled again.
  CHECK(client.CommitByRename(closed_fill, Payload(10)) == ESTALE);
  ::usleep(600000);
  CHECK(client.CommitByRename(closed_fill, Payload(10)) == 0);
}

TEST_CASE("Mount single flight: a joiner learns pending, finished, failed without the bytes") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity();
  std::string part = client.PathOf(id) + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  CHECK(Fill(m, id) == "errno " + std::to_string(ENODATA));
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  // The joiner (another member) gets EEXIST and reads the outcome instead of spinning.
  CHECK(AsUser(1000, 1000, [&] { return Errno(::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600)); }) ==
        EEXIST);
  CHECK(AsUser(1000, 1000, [&] { return Fill(m, id) == "pending" ? 0 : 1; }) == 0);
  char buf[32];
  CHECK(::getxattr(part.c_str(), "user.gpucache.fill", buf, sizeof buf) == 7);
  ::close(fd);
  REQUIRE(::unlink(part.c_str()) == 0);
  CHECK(Fill(m, id) == "failed");
  REQUIRE(client.Commit(id, Payload(10)) == 0);
  CHECK(Fill(m, id) == "finished");
  CHECK(AsUser(2000, 2000, [&] { return Fill(m, id) == "errno " + std::to_string(EACCES) ? 0 : 1; }) == 0);
}

TEST_CASE("Mount drain: admits are EROFS, reads and in-flight fills go on, rollback, finish fences") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity stored = SampleIdentity("acme", 2), inflight = SampleIdentity("acme", 3),
                refused = SampleIdentity("acme", 4);
  REQUIRE(client.Commit(stored, Payload(100)) == 0);
  int fd = ::open((client.PathOf(inflight) + ".part").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  CHECK(AsUser(1000, 1000, [&] { return Ctl(m, {{"op", "drain"}})["errno"] == "EACCES" ? 0 : 1; }) == 0);
  REQUIRE(Ctl(m, {{"op", "drain"}, {"action", "start"}})["draining"] == true);
  CHECK(client.Commit(refused, Payload(100)) == EROFS);
  CHECK(std::holds_alternative<Bytes>(client.Read(stored)));
  Bytes ident = EncodePhysicalKey(inflight);
  REQUIRE(::fsetxattr(fd, "user.gpucache.identity", ident.data(), ident.size(), 0) == 0);
  REQUIRE(::write(fd, "xyz", 3) == 3);
  ::close(fd);
  CHECK(::rename((client.PathOf(inflight) + ".part").c_str(), client.PathOf(inflight).c_str()) == 0);
  REQUIRE(Ctl(m, {{"op", "drain"}, {"action", "rollback"}})["draining"] == false);
  CHECK(client.Commit(refused, Payload(100)) == 0);
  uint64_t epoch = std::stoull(ReadText(m.mnt() + "/.gpucache/epoch"));
  REQUIRE(Ctl(m, {{"op", "drain"}, {"action", "start"}})["ok"] == true);
  json finished = Ctl(m, {{"op", "drain"}, {"action", "finish"}});
  CHECK(finished["epoch"] == epoch + 1);
  CHECK(Ctl(m, {{"op", "drain"}, {"action", "rollback"}})["ok"] == false);
  CHECK(ReadText(m.mnt() + "/.gpucache/stats").rfind("epoch " + std::to_string(epoch + 1) + " draining", 0) == 0);
}

TEST_CASE("Mount: an idle .part is abandoned after its lease") {
  MountedFs m(TestConfig("reservation_lease = 0.2"));
  CacheIdentity id = SampleIdentity();
  std::string part = MountClient(m.mnt()).PathOf(id) + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  struct stat st;
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {  // the housekeeper runs every second
    ::usleep(100000);
    gone = ::stat(part.c_str(), &st) != 0;
  }
  CHECK(gone);
  CHECK(Fill(m, id) == "failed");
  CHECK(ReadText(m.mnt() + "/.gpucache/stats").find(" expired=1") != std::string::npos);
}

}  // namespace
}  // namespace gpucache

namespace gpucache {
namespace {

TEST_CASE("Mount isolate: one data directory leaves service, its blocks are misses, never the last") {
  TempDir dirs;
  std::string d0 = dirs.path() + "/nvme0", d1 = dirs.path() + "/nvme1";
  MountedFs m("data_dirs = [\"" + d0 + "\", \"" + d1 + "\"]\n" + TestConfig());
  MountClient client(m.mnt());
  std::vector<CacheIdentity> ids;
  for (uint8_t i = 0; i < 12; ++i) {
    CacheIdentity id = SampleIdentity("acme", 16);
    id.chain[0] = Hash(i);
    REQUIRE(client.Commit(id, Payload(1000, i)) == 0);
    ids.push_back(id);
  }
  auto on = [&](const std::string& dir, const CacheIdentity& id) {
    return std::filesystem::exists(dir + "/blocks/" + AddressOf(id).RelativePath());
  };
  int in_d0 = 0;
  for (const auto& id : ids) in_d0 += on(d0, id);
  REQUIRE(in_d0 > 0);
  REQUIRE(in_d0 < 12);
  CHECK(Ctl(m, {{"op", "isolate"}, {"dir", d0}})["ok"] == true);
  for (const auto& id : ids) {
    struct stat st;
    bool present = ::stat(client.PathOf(id).c_str(), &st) == 0;
    CHECK(present == on(d1, id));
  }
  json last = Ctl(m, {{"op", "isolate"}, {"dir", d1}});
  CHECK(last["ok"] == false);
  CHECK(last["errno"] == "EINVAL");
  CHECK(Ctl(m, {{"op", "isolate"}, {"dir", "/elsewhere"}})["errno"] == "ENOENT");
  CHECK(AsUser(1000, 1000, [&] { return Ctl(m, {{"op", "isolate"}, {"dir", d1}})["errno"] == "EACCES" ? 0 : 1; }) == 0);
  // New fills go to the directory still in service.
  CacheIdentity fresh = SampleIdentity("acme", 16);
  fresh.chain[0] = Hash(99);
  REQUIRE(client.Commit(fresh, Payload(10)) == 0);
  CHECK(on(d1, fresh));
  CHECK(Ctl(m, {{"op", "status"}})["data_dirs"][0]["isolated"] == true);
}

// Regression (review, 2026-12-07): docs/operations.md says nothing in an isolated directory is
// touched, but reclaiming a block quarantined there before the isolation deleted its file.
TEST_CASE("Mount isolate: a block quarantined in the directory before it was isolated keeps its file") {
  // The second directory: a quarantined file's directory is known by its path only (the first
  // version of this fix looked at directory 0 whatever the file's).
  TempDir dirs;
  std::string d0 = dirs.path() + "/nvme0", d1 = dirs.path() + "/nvme1";
  MountedFs m("data_dirs = [\"" + d0 + "\", \"" + d1 + "\"]\n" + TestConfig());
  MountClient client(m.mnt());
  std::optional<CacheIdentity> on_d1, on_d0;
  for (uint8_t i = 0; i < 40 && !(on_d1 && on_d0); ++i) {
    CacheIdentity id = SampleIdentity("acme", 16);
    id.chain[0] = Hash(i);
    REQUIRE(client.Commit(id, Payload(1000, i)) == 0);
    (std::filesystem::exists(d1 + "/blocks/" + AddressOf(id).RelativePath()) ? on_d1 : on_d0) = id;
  }
  REQUIRE(on_d1);
  REQUIRE(on_d0);
  for (const CacheIdentity& id : {*on_d1, *on_d0}) {  // both open: quarantined, files kept
    int fd = ::open(client.PathOf(id).c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::unlink(client.PathOf(id).c_str()) == 0);
    ::close(fd);
  }
  ::usleep(50000);  // RELEASE is asynchronous
  auto quarantined_files = [&](const std::string& dir) {
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/quarantine")) n += e.is_regular_file();
    return n;
  };
  REQUIRE(quarantined_files(d1) == 1);
  REQUIRE(quarantined_files(d0) == 1);
  REQUIRE(Ctl(m, {{"op", "isolate"}, {"dir", d1}})["ok"] == true);
  json list = Ctl(m, {{"op", "quarantine"}});
  REQUIRE(list["quarantine"].size() == 2);
  for (const json& q : list["quarantine"]) CHECK(Ctl(m, {{"op", "reclaim"}, {"drained", q["region"]}})["ok"] == true);
  CHECK(Ctl(m, {{"op", "quarantine"}})["quarantine"].empty());
  CHECK(quarantined_files(d1) == 1);  // in the isolated directory: untouched
  CHECK(quarantined_files(d0) == 0);  // in service: reclaimed
}

TEST_CASE("Operations: a .part's mtime and ctime move with its writes and truncates (make, rsync compare them)") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity id = SampleIdentity("acme", 12);
  std::string part = client.PathOf(id) + ".part";
  REQUIRE(::mkdir(NsDir(m, id).c_str(), 0770) == 0);
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  auto mtime_of = [&] {
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    CHECK(st.st_mtim.tv_sec == st.st_ctim.tv_sec);
    CHECK(st.st_mtim.tv_nsec == st.st_ctim.tv_nsec);
    return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  };
  int64_t created = mtime_of();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Bytes data = Payload(4096);
  REQUIRE(::write(fd, data.data(), data.size()) == 4096);
  int64_t written = mtime_of();
  CHECK(written > created);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(::ftruncate(fd, 8192) == 0);
  CHECK(mtime_of() > written);
  ::close(fd);
}

TEST_CASE("Operations: a namespace directory's mtime moves when a fill or a block comes or goes, and survives a restart") {
  MountedFs m;
  MountClient client(m.mnt());
  CacheIdentity first = SampleIdentity("acme", 13), second = SampleIdentity("acme", 14);
  std::string dir = NsDir(m, first);
  auto mtime_of_dir = [&] {
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK(st.st_mtim.tv_sec == st.st_ctim.tv_sec);
    CHECK(st.st_mtim.tv_nsec == st.st_ctim.tv_nsec);
    return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  };
  auto mtime_of = [](const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  };
  REQUIRE(::mkdir(dir.c_str(), 0770) == 0);
  int64_t made = mtime_of_dir();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(client.Commit(first, Payload(1000)) == 0);
  int64_t committed = mtime_of_dir();
  CHECK(committed > made);
  CHECK(committed >= mtime_of(client.PathOf(first)));  // the .part went after the commit
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(client.Commit(second, Payload(1000)) == 0);
  int64_t newest_commit = mtime_of(client.PathOf(second));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(::unlink(client.PathOf(first).c_str()) == 0);
  int64_t unlinked = mtime_of_dir();
  CHECK(unlinked > newest_commit);
  // A restart knows the newest commit in it (departures since are not kept): not the mount time.
  REQUIRE(m.Stop() == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  m.Start();
  CHECK(mtime_of_dir() == newest_commit);
}

// A long listing is paged through several READDIRs; each block must come back once.
TEST_CASE("Mount: a listing longer than one READDIR reply names every block exactly once") {
  MountedFs m;
  MountClient client(m.mnt());
  constexpr int kBlocks = 1200;  // about 120 KB of entries
  CacheIdentity id = SampleIdentity();
  std::set<std::string> committed;
  for (int i = 0; i < kBlocks; ++i) {
    id.chain[0][0] = static_cast<uint8_t>(i);
    id.chain[0][1] = static_cast<uint8_t>(i >> 8);
    REQUIRE(client.Commit(id, Payload(64)) == 0);
    committed.insert(std::filesystem::path(client.PathOf(id)).filename().string());
  }
  REQUIRE(committed.size() == size_t{kBlocks});
  const std::string kReadDirs = "gpucache_fuse_op_seconds_count{op=\"readdir\"}";
  double before = std::max(Metric(m, kReadDirs), 0.0);
  // getdents64 with a 4 KiB buffer, as a small reader would: glibc's readdir asks for more.
  int fd = ::open(NsDir(m, id).c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  std::multiset<std::string> listed;
  alignas(8) char buf[4096];
  for (long n; (n = ::syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0;) {
    for (long at = 0; at < n;) {
      const auto* e = reinterpret_cast<const dirent64*>(buf + at);
      std::string name = e->d_name;
      if (name != "." && name != "..") listed.insert(name);
      at += e->d_reclen;
    }
  }
  ::close(fd);
  CHECK(Metric(m, kReadDirs) - before >= 4);  // the open, two pages at least, the empty end
  CHECK(listed.size() == committed.size());
  CHECK(std::set<std::string>(listed.begin(), listed.end()) == committed);
}

}  // namespace
}  // namespace gpucache
