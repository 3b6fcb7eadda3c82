// gpucache-client: commit, read and probe blocks through a mount from the shell.
//
//   gpucache-client put MOUNT IDENTITY.toml FILE     commit FILE's bytes as the block
//   gpucache-client get MOUNT IDENTITY.toml [OUT]    write the block to OUT (default stdout)
//
// Exit status: 0 on success, 1 on a miss (ENOENT), 2 on any other error, 64 on bad usage.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>

#include "clients/cpp/identity_file.h"
#include "clients/cpp/mount_client.h"

namespace {

int Usage() {
  std::cerr << "usage: gpucache-client put MOUNT IDENTITY.toml FILE\n"
               "       gpucache-client get MOUNT IDENTITY.toml [OUT]\n";
  return 64;
}

int Put(const gpucache::MountClient& client, const gpucache::CacheIdentity& id, const char* file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::cerr << "gpucache-client: cannot read " << file << "\n";
    return 2;
  }
  gpucache::Bytes data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (int err = client.Commit(id, data)) {
    std::cerr << "gpucache-client: commit failed: " << std::strerror(err) << "\n";
    return 2;
  }
  std::cout << client.PathOf(id) << "\n";
  return 0;
}

int Get(const gpucache::MountClient& client, const gpucache::CacheIdentity& id, const char* out) {
  auto r = client.Read(id);
  if (auto* err = std::get_if<int>(&r)) {
    std::cerr << "gpucache-client: " << client.PathOf(id) << ": " << std::strerror(*err) << "\n";
    return *err == ENOENT ? 1 : 2;
  }
  const auto& bytes = std::get<gpucache::Bytes>(r);
  const char* name = out ? out : "standard output";
  FILE* f = out ? std::fopen(out, "wb") : stdout;
  if (!f) {
    std::cerr << "gpucache-client: cannot write " << name << ": " << std::strerror(errno) << "\n";
    return 2;
  }
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (out ? std::fclose(f) : std::fflush(f)) == 0 && ok;
  if (!ok) {
    std::cerr << "gpucache-client: cannot write " << name << ": " << std::strerror(errno) << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return Usage();
  std::string cmd = argv[1];
  gpucache::MountClient client(argv[2]);
  gpucache::CacheIdentity id;
  try {
    id = gpucache::IdentityFromTomlFile(argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "gpucache-client: " << e.what() << "\n";
    return 64;
  }
  if (cmd == "put" && argc == 5) return Put(client, id, argv[4]);
  if (cmd == "get" && (argc == 4 || argc == 5)) return Get(client, id, argc == 5 ? argv[4] : nullptr);
  return Usage();
}
