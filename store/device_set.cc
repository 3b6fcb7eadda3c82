// DeviceSet: the data directories as fault domains (store/device_set.h).
#include "store/device_set.h"

#include <algorithm>
#include <chrono>

#include "store/placement.h"

namespace gpucache {
namespace {

std::vector<DataDir> DirsOf(const std::vector<DeviceSet::Device>& devices) {
  std::vector<DataDir> dirs;
  for (const DeviceSet::Device& d : devices) dirs.push_back(d.dir);
  return dirs;
}

}  // namespace

DeviceSet::DeviceSet(Env& env, std::vector<Device> devices, double min_free_percent)
    : env_(env), min_free_percent_(min_free_percent), dirs_(DirsOf(devices)), free_bytes_(devices.size(), 1) {
  for (Device& d : devices) {
    locks_.push_back(std::move(d.lock));
    isolated_.push_back(d.isolated);
  }
}

uint64_t DeviceSet::KeptFree(uint64_t total) const {
  return std::min(total, static_cast<uint64_t>(static_cast<double>(total) * min_free_percent_ / 100.0));
}

bool DeviceSet::Isolated(size_t dev) const {
  MutexLock lock(mu_);
  return isolated_[dev];
}

size_t DeviceSet::PlaceFor(const BlockAddress& a) const {
  std::string key = a.RelativePath();
  MutexLock lock(mu_);
  RefreshWeightsLocked();
  std::vector<PlacementCandidate> candidates;
  candidates.reserve(dirs_.size());
  for (size_t d = 0; d < dirs_.size(); ++d) candidates.push_back({d, free_bytes_[d], !isolated_[d]});
  return PickPlacement(key, candidates).value_or(0);
}

void DeviceSet::RefreshWeightsLocked() const {
  uint64_t now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  if (weights_read_ns_ != 0 && now - weights_read_ns_ < 1000000000ull) return;
  weights_read_ns_ = now;
  for (size_t d = 0; d < dirs_.size(); ++d) {
    // Unreadable: keep the last weight rather than starve or flood the directory.
    if (Result<FsSpace> space = env_.SpaceOf(dirs_[d].root()); space.ok()) {
      uint64_t kept = KeptFree(space->total_bytes);
      free_bytes_[d] = static_cast<double>(space->free_bytes - std::min(space->free_bytes, kept));
    }
  }
}

StatusCode DeviceSet::Isolate(const std::string& path, size_t& dev, bool& newly) {
  MutexLock lock(mu_);
  dev = dirs_.size();
  newly = false;
  size_t in_service = 0;
  for (size_t d = 0; d < dirs_.size(); ++d) {
    if (!isolated_[d]) in_service++;
    if (dirs_[d].root() == path) dev = d;
  }
  if (dev == dirs_.size()) return StatusCode::kNotFound;
  if (isolated_[dev]) return StatusCode::kOk;
  if (in_service == 1) return StatusCode::kInvalidArgument;  // never the last one
  isolated_[dev] = true;
  newly = true;
  return StatusCode::kOk;
}

std::vector<DomainInfo> DeviceSet::Domains() const {
  MutexLock lock(mu_);
  std::vector<DomainInfo> out;
  for (size_t d = 0; d < dirs_.size(); ++d) out.push_back({dirs_[d].root(), isolated_[d]});
  return out;
}

}  // namespace gpucache
