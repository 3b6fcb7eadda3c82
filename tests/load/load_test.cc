// Load: 16 writers and 16 readers through a real mount for GPUCACHE_LOAD_SECONDS (default 10;
// packaging/sanitize.sh runs 60 s under ASan+UBSan and 30 s under TSan), on a key space small
// enough that writers race on the same key and readers race with commits and unlinks.
//
// Every block carries its own proof: the first 16 bytes are (key index, generation, length),
// the rest a stream derived from them. A reader that gets a block checks every byte against
// the key it asked for; any byte that does not match is a wrong byte served.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "clients/cpp/mount_client.h"
#include "store/layout.h"
#include "tests/mount/mount_helpers.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/sample_identity.h"

namespace gpucache {
namespace {

constexpr int kKeys = 48;
constexpr int kWriters = 16, kReaders = 16;

CacheIdentity Key(int k) {
  CacheIdentity id = test::SampleIdentity("acme");
  id.chain[1] = test::Hash(static_cast<uint8_t>(k));
  return id;
}

Bytes Stream(uint32_t key, uint32_t gen, uint64_t len) {
  Bytes b(len);
  uint64_t x = (uint64_t{key} << 32 | gen) * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t i = 0; i < len; i++) {
    if (i < 16) continue;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b[i] = static_cast<uint8_t>(x);
  }
  std::memcpy(b.data(), &key, 4);
  std::memcpy(b.data() + 4, &gen, 4);
  std::memcpy(b.data() + 8, &len, 8);
  return b;
}

// The number of bytes of `got` that are not what a block of key `key` must hold.
uint64_t WrongBytes(int key, const Bytes& got) {
  if (got.size() < 16) return got.size() + 1;
  uint32_t k, gen;
  uint64_t len;
  std::memcpy(&k, got.data(), 4);
  std::memcpy(&gen, got.data() + 4, 4);
  std::memcpy(&len, got.data() + 8, 8);
  if (k != static_cast<uint32_t>(key) || len != got.size()) return got.size();
  Bytes want = Stream(k, gen, len);
  uint64_t wrong = 0;
  for (size_t i = 0; i < got.size(); i++) wrong += got[i] != want[i];
  return wrong;
}

// The epoch in a fence reply {"epoch":N,...}, or 0.
uint64_t EpochOf(const std::string& reply) {
  auto at = reply.find("\"epoch\":");
  return at == std::string::npos ? 0 : std::strtoull(reply.c_str() + at + 8, nullptr, 10);
}

// MountClient::Commit, telling which step failed (1 create, 2 mkdir, 3 xattr, 4 write,
// 5 close, 6 rename).
int CommitSteps(const MountClient& client, const CacheIdentity& id, const Bytes& payload, int& step) {
  std::string path = client.PathOf(id), part = path + ".part";
  step = 1;
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    step = 2;
    std::string dir = path.substr(0, path.rfind('/'));
    if (::mkdir(dir.c_str(), 0770) != 0 && errno != EEXIST) return errno;
    step = 1;
    fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  }
  if (fd < 0) return errno;
  Bytes gpck = EncodePhysicalKey(id);
  int err = 0;
  step = 3;
  if (::fsetxattr(fd, "user.gpucache.identity", gpck.data(), gpck.size(), 0) != 0) err = errno;
  if (!err) {
    step = 4;
    // A write split into several FUSE requests returns a short count when a later piece fails
    // (a fence mid-write): write the rest, and the next call reports the error itself.
    for (size_t done = 0; !err && done < payload.size();) {
      ssize_t n = ::write(fd, payload.data() + done, payload.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) err = n < 0 ? errno : EIO;
      else done += static_cast<size_t>(n);
    }
  }
  if (!err) step = 5;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err) {
    step = 6;
    if (::rename(part.c_str(), path.c_str()) != 0) err = errno;
  }
  if (err) ::unlink(part.c_str());
  return err;
}

int Seconds() {
  const char* s = std::getenv("GPUCACHE_LOAD_SECONDS");
  return s ? std::max(1, std::atoi(s)) : 10;
}

}  // namespace

TEST_CASE("Load: 16 writers and 16 readers, same-key races, every byte checked") {
  test::MountedFs fs(test::TestConfig("max_retained_bytes = 67108864\n"));  // eviction joins in
  MountClient client(fs.mnt());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> commits{0}, races{0}, unlinks{0}, reads{0}, misses{0}, wrong{0},
      errors{0}, bytes_read{0}, fenced{0}, full{0}, fences{0};
  std::atomic<uint32_t> generation{1};
  std::atomic<int> last_error{0};
  std::atomic<int> last_step{0};
  std::mutex seen_mu;
  std::vector<std::string> seen;  // the first unexpected errors, each with where it came from
  auto writer = [&](int seed) {
    std::mt19937 rng(seed);
    while (!stop) {
      int k = static_cast<int>(rng() % kKeys);
      if (rng() % 4 == 0) {  // invalidate, so the key can be filled again with other bytes
        if (::unlink(client.PathOf(Key(k)).c_str()) == 0) unlinks++;
        continue;
      }
      uint64_t len = 16 + rng() % (3 << 20);
      int step = 0;
      int err = CommitSteps(client, Key(k), Stream(k, generation++, len), step);
      if (err == 0) commits++;
      else if (err == EEXIST) races++;  // another writer holds or committed the key
      else if (err == ESTALE) fenced++;  // the fencer bumped the epoch under this fill
      else if (err == ENOSPC) full++;    // everything left is open (quarantined) right now
      else {
        errors++, last_error = err, last_step = step;
        // What the names say right after: tells a fill that ended under its writer (no .part)
        // from one refused while it still stands.
        struct stat st;
        bool part_there = ::stat((client.PathOf(Key(k)) + ".part").c_str(), &st) == 0;
        bool block_there = ::stat(client.PathOf(Key(k)).c_str(), &st) == 0;
        std::lock_guard lock(seen_mu);
        if (seen.size() < 8) {
          seen.push_back(std::string(std::strerror(err)) + " at step " + std::to_string(step) +
                         " (key " + std::to_string(k) + ", .part " + (part_there ? "present" : "absent") +
                         ", block " + (block_there ? "present" : "absent") + ")");
        }
      }
    }
  };
  auto reader = [&](int seed) {
    std::mt19937 rng(seed);
    while (!stop) {
      int k = static_cast<int>(rng() % kKeys);
      auto got = client.Read(Key(k));
      reads++;
      if (std::holds_alternative<int>(got)) {
        int err = std::get<int>(got);
        if (err == ENOENT) misses++;
        else errors++, last_error = err;
        continue;
      }
      bytes_read += std::get<Bytes>(got).size();
      wrong += WrongBytes(k, std::get<Bytes>(got));
    }
  };
  // Blocks unlinked while a reader has them open stay quarantined until a fence and a fenced
  // reclaim: an admin does that every two seconds, fencing the fills in flight too.
  auto fencer = [&] {
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      uint64_t epoch = EpochOf(test::Control(fs, R"({"op":"fence"})"));
      if (epoch == 0) { errors++; continue; }
      test::Control(fs, R"({"op":"reclaim","fenced":)" + std::to_string(epoch) + "}");
      fences++;
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(fencer);
  for (int i = 0; i < kWriters; i++) threads.emplace_back(writer, 1000 + i);
  for (int i = 0; i < kReaders; i++) threads.emplace_back(reader, 2000 + i);
  std::this_thread::sleep_for(std::chrono::seconds(Seconds()));
  stop = true;
  for (auto& t : threads) t.join();
  MESSAGE("load: " << Seconds() << " s, commits=" << commits.load() << " same_key_races=" << races.load()
                   << " unlinks=" << unlinks.load() << " reads=" << reads.load() << " misses=" << misses.load()
                   << " MiB_read=" << bytes_read / (1 << 20) << " fences=" << fences.load()
                   << " fenced_fills=" << fenced.load() << " enospc=" << full.load() << " errors=" << errors.load()
                   << " wrong_bytes=" << wrong.load());
  CHECK(wrong.load() == 0);
  CHECK_MESSAGE(errors == 0, "last errno " << last_error.load() << " " << std::string(std::strerror(last_error.load())) << " at " << last_step.load());
  CHECK(commits > 0);
  CHECK(races > 0);
  CHECK(reads > misses);
  int status = fs.Stop();
  std::string log = fs.Log();
  for (const std::string& e : seen) MESSAGE("writer: " << e);
  if (errors != 0) {  // what the daemon said meanwhile: where an unexpected errno came from
    std::istringstream lines(log);
    int shown = 0;
    for (std::string line; std::getline(lines, line) && shown < 40;) {
      for (const char* word : {"warn", "error", "corrupt", "failed"}) {
        if (line.find(word) == std::string::npos) continue;
        MESSAGE("daemon: " << line);
        shown++;
        break;
      }
    }
  }
  for (const char* report : {"AddressSanitizer", "runtime error:", "ThreadSanitizer",
                             "LeakSanitizer"}) {
    CHECK_MESSAGE(log.find(report) == std::string::npos, "daemon log: " << log.substr(0, 4000));
  }
  CHECK(status == 0);
}

}  // namespace gpucache
