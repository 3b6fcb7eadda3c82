// gpucachectl commands. Each returns the process exit code (docs/gpucachectl.md):
//   0 success, 1 the thing asked about is absent (a miss), 2 an error, 64 bad usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gpucache::ctl {

int Path(const std::string& identity_file, bool json);
int Lookup(const std::string& mountpoint, const std::string& identity_file, bool json);
int Status(const std::string& mountpoint, bool json);
int Inspect(const std::string& block_path, bool verify, bool json);
int Fence(const std::string& mountpoint, bool json);
int Reclaim(const std::string& mountpoint, std::optional<uint64_t> fenced_epoch,
            std::optional<uint64_t> drained_region, bool json);
int Quarantine(const std::string& mountpoint, bool json);
int Drain(const std::string& mountpoint, const std::string& action, bool json);
int Isolate(const std::string& mountpoint, const std::string& dir, bool json);
int Discover(const std::string& sysfs, const std::string& proc, const std::string& dev, bool json);
// `op` is evict, pin or unpin; `block` is TENANT/NAMESPACE/BLOCK or a path inside the mount.
int BlockOp(const std::string& mountpoint, const std::string& op, const std::string& block, bool json);

}  // namespace gpucache::ctl
