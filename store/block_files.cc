#include "store/block_files.h"

#include <errno.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "store/block_file.h"
#include "store/posix_io.h"

namespace gpucache {

Result<BlockInfo> ReadBlockInfo(Env& env, const std::string& path, std::string& why) {
  int opened = env.OpenRead(path);
  if (opened == -ELOOP) {  // a symlink planted where a block belongs
    why = "not a regular file";
    return StatusCode::kInvalidArgument;
  }
  if (opened < 0) {
    why = "cannot open (" + std::string(ToString(StatusFromErrno(-opened))) + ")";
    return StatusCode::kIoError;
  }
  Fd fd(opened);
  Result<BlockHeader> header = ReadBlockHeader(env, fd.get());
  if (!header.ok()) {
    bool damaged = header.status() == StatusCode::kInvalidArgument;
    why = damaged ? "corrupt or truncated header"
                  : "cannot read (" + std::string(ToString(header.status())) + ")";
    return damaged ? StatusCode::kInvalidArgument : StatusCode::kIoError;
  }
  Result<CacheIdentity> identity = DecodePhysicalKey(header->identity);
  if (!identity.ok()) {
    why = "invalid identity";
    return StatusCode::kInvalidArgument;
  }
  BlockInfo info;
  info.address = AddressOf(identity.value());
  info.identity = std::move(identity.value());
  info.canonical_identity = std::move(header->identity);
  info.size = header->payload_length;
  info.commit_epoch = header->commit_epoch;
  info.region_id = header->region_id;
  info.owner = Owner{header->owner_uid, header->owner_gid};
  info.commit_time_ns = header->commit_time_ns;
  info.checksum = "xxh3-128:" + header->checksums.digest_hex;
  info.keys = IndexKeysOf(info.identity, info.canonical_identity);
  return info;
}

std::string SetAsideDamaged(Env& env, const DataDir& d, const std::string& path) {
  // Named by when it was found, then its own name: the oldest sort first.
  auto now = std::chrono::system_clock::now().time_since_epoch();
  char stamp[24];
  std::snprintf(stamp, sizeof stamp, "%020llu", static_cast<unsigned long long>(
                                                    std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  std::string to =
      DataDir::In(d.Damaged(), std::string(stamp) + "-" + path.substr(path.find_last_of('/') + 1));
  StatusCode made = env.MakeDir(d.Damaged());
  if ((made != StatusCode::kOk && made != StatusCode::kExists) || env.Rename(path, to) != StatusCode::kOk) {
    env.Remove(path);
    return path + " deleted (it could not be moved to " + d.Damaged() + ")";
  }
  std::string done = path + " moved to " + to;
  Result<std::vector<std::string>> listed = env.ListDir(d.Damaged());
  if (!listed.ok()) return done;
  // Only what this function put there counts and goes (a 20-digit stamp, a dash, the name):
  // anything else in damaged/ is an operator's, and stays.
  std::vector<std::string> kept;
  for (std::string& name : listed.value()) {
    bool ours = name.size() > 21 && name[20] == '-' &&
                std::all_of(name.begin(), name.begin() + 20, [](char c) { return c >= '0' && c <= '9'; });
    if (ours) kept.push_back(std::move(name));
  }
  if (kept.size() <= kMaxDamagedFiles) return done;
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i + kMaxDamagedFiles < kept.size(); ++i) {
    env.Remove(DataDir::In(d.Damaged(), kept[i]));
  }
  return done;
}

}  // namespace gpucache
