// gpucache-client: commit, read and probe blocks through a mount from the shell.
//
//   gpucache-client put MOUNT IDENTITY.toml FILE     commit FILE's bytes as the block
//   gpucache-client get MOUNT IDENTITY.toml [OUT]    write the block to OUT (default stdout)
//
// Exit status: 0 on success (a put of a block already committed included), 1 on a miss
// (ENOENT), 2 on any other error (no gpucachefs mounted at MOUNT included), 64 on bad usage or
// an invalid identity file.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <variant>

#include "clients/cpp/identity_file.h"
#include "clients/cpp/mount_client.h"

namespace {

constexpr char kUsage[] =
    "usage: gpucache-client put MOUNT IDENTITY.toml FILE   commit FILE's bytes as the block\n"
    "       gpucache-client get MOUNT IDENTITY.toml [OUT]  write the block to OUT (default stdout)\n"
    "       gpucache-client --help | --version\n"
    "Exit codes: 0 ok (put: committed now or already present), 1 miss, 2 error,\n"
    "64 bad usage or an invalid identity file.\n";

int Usage() {
  std::cerr << kUsage;
  return 64;
}

// No gpucachefs answers at MOUNT: not a miss, and nothing is written there (a plain directory
// would take the block and a later get would serve it unchecked).
int NotMounted(const std::string& mount) {
  std::cerr << "gpucache-client: " << mount << ": not a gpucachefs mount (is gpucachefs mounted there?)\n";
  return 2;
}

// An ENOENT from a mount whose daemon answers but has no such tenant: a typo or a tenant removed
// from the configuration, which no recomputation fixes.
bool NoSuchTenant(const std::string& mount, const gpucache::CacheIdentity& id) {
  struct stat st;
  if (::stat((mount + "/" + id.tenant).c_str(), &st) == 0) return false;
  std::cerr << "gpucache-client: " << mount << ": no tenant '" << id.tenant
            << "' on this mount (see gpucachectl status)\n";
  return true;
}

int Put(const gpucache::MountClient& client, const std::string& mount, const gpucache::CacheIdentity& id,
        const char* file) {
  if (!client.HasDaemon()) return NotMounted(mount);
  auto read = gpucache::ReadWholeFile(file);
  if (auto* err = std::get_if<int>(&read)) {
    std::cerr << "gpucache-client: cannot read " << file << ": "
              << (*err == ENOMEM ? "too large to hold in memory" : std::strerror(*err)) << "\n";
    return 2;
  }
  const gpucache::Bytes& data = std::get<gpucache::Bytes>(read);
  if (data.empty()) {
    std::cerr << "gpucache-client: " << file << " is empty: a block holds at least one byte\n";
    return 2;
  }
  std::string path = client.PathOf(id);
  int err = client.Commit(id, data);
  struct stat st;
  if (err == EEXIST && ::stat(path.c_str(), &st) == 0) {
    // For a cache, a block someone already committed is the outcome the caller wanted: the
    // identity names the bytes, so the committed block serves this put too.
    std::cerr << "gpucache-client: already present: " << path << "\n";
  } else if (err == EEXIST) {
    std::cerr << "gpucache-client: " << path << ": another writer is filling this block now "
                 "(EEXIST); not written twice (docs/single-flight.md)\n";
    return 2;
  } else if (err == ENOENT && NoSuchTenant(mount, id)) {
    return 2;
  } else if (err) {
    std::cerr << "gpucache-client: commit failed: " << path << ": " << std::strerror(err) << "\n";
    return 2;
  }
  std::cout << path << "\n";
  return 0;
}

// Writes `bytes` to `f` and flushes it: 0 or an errno.
int WriteStream(FILE* f, const gpucache::Bytes& bytes) {
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fflush(f) == 0 && ok ? 0 : (errno ? errno : EIO);
}

// Writes `bytes` as the file `out`: a regular file (or a new one) is replaced whole, by a
// temporary beside it renamed over it, so a failed write (a full disk) leaves `out` as it was;
// anything else (a FIFO, /dev/stdout) is written in place. 0 or an errno.
int WriteOut(const std::string& out, const gpucache::Bytes& bytes) {
  struct stat st;
  bool exists = ::stat(out.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    FILE* f = std::fopen(out.c_str(), "wb");
    if (!f) return errno;
    int err = WriteStream(f, bytes);
    if (std::fclose(f) != 0 && !err) err = errno;
    return err;
  }
  std::string tmp = out + ".gpucache-client.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return errno;
  mode_t mask = ::umask(0);
  ::umask(mask);
  int err = ::fchmod(fd, exists ? (st.st_mode & 07777) : (0666 & ~mask)) != 0 ? errno : 0;
  if (!err) err = gpucache::WriteAll(fd, bytes);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), out.c_str()) != 0) err = errno;
  if (err) ::unlink(tmp.c_str());
  return err;
}

int Get(const gpucache::MountClient& client, const std::string& mount, const gpucache::CacheIdentity& id,
        const char* out) {
  auto r = client.Read(id);
  if (auto* err = std::get_if<int>(&r)) {
    if (*err == ENOENT && !client.HasDaemon()) return NotMounted(mount);  // not a miss
    if (*err == ENOENT && NoSuchTenant(mount, id)) return 2;
    std::cerr << "gpucache-client: " << client.PathOf(id) << ": " << std::strerror(*err) << "\n";
    return *err == ENOENT ? 1 : 2;
  }
  const auto& bytes = std::get<gpucache::Bytes>(r);
  int err = out ? WriteOut(out, bytes) : WriteStream(stdout, bytes);
  if (err) {
    std::cerr << "gpucache-client: cannot write " << (out ? out : "standard output") << ": "
              << std::strerror(err) << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string first = argc > 1 ? argv[1] : "";
  if (argc == 2 && (first == "--help" || first == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  if (argc == 2 && first == "--version") {
    std::cout << "gpucache-client " << GPUCACHE_VERSION << "\n";
    return 0;
  }
  bool put = first == "put" && argc == 5, get = first == "get" && (argc == 4 || argc == 5);
  if (!put && !get) return Usage();
  gpucache::MountClient client(argv[2]);
  gpucache::CacheIdentity id;
  try {
    id = gpucache::IdentityFromTomlFile(argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "gpucache-client: " << e.what() << "\n";
    return 64;
  }
  if (put) return Put(client, argv[2], id, argv[4]);
  return Get(client, argv[2], id, argc == 5 ? argv[4] : nullptr);
}
