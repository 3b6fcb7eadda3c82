// DeviceSet: a FileMedium's data directories as fault domains: which are in service, where a new
// block goes (weighted rendezvous over each directory's free bytes, store/placement.h), and
// taking one out of service. The rule of placement is store/placement.cc; this part feeds it.
// A directory's paths (its DataDir) never change; whether it is in service may, at any time.
//
// Thread safety: every method may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/block_store.h"
#include "store/data_dir.h"
#include "store/env.h"
#include "store/mutex.h"
#include "store/posix_io.h"

namespace gpucache {

class DeviceSet {
 public:
  struct Device {
    DataDir dir;
    Fd lock;                // held for the medium's life: one daemon per directory
    bool isolated = false;  // out of service from the start
  };
  // `min_free_percent`: the share of each filesystem fills leave free (StoreOptions); placement
  // weighs each directory by what is free above it, so a directory below it takes no new block.
  DeviceSet(Env& env, std::vector<Device> devices, double min_free_percent = 0);

  size_t size() const { return dirs_.size(); }
  // The bytes min_free_percent keeps free on a filesystem of `total` bytes (at most `total`).
  uint64_t KeptFree(uint64_t total) const;
  const DataDir& dir(size_t dev) const { return dirs_[dev]; }
  bool Isolated(size_t dev) const EXCLUDES(mu_);
  // The directory in service that a new block at `address` goes to. Free bytes are re-read at
  // most once a second; an unreadable one keeps its last weight.
  size_t PlaceFor(const BlockAddress& address) const EXCLUDES(mu_);
  // Takes the directory at `path` out of service; `dev` is set to its index. kOk also if it
  // was out already (`newly` false); kNotFound for no such directory; kInvalidArgument for the
  // last one in service (never isolated).
  StatusCode Isolate(const std::string& path, size_t& dev, bool& newly) EXCLUDES(mu_);
  std::vector<DomainInfo> Domains() const EXCLUDES(mu_);

 private:
  void RefreshWeightsLocked() const REQUIRES(mu_);

  Env& env_;
  const double min_free_percent_;
  const std::vector<DataDir> dirs_;
  std::vector<Fd> locks_;
  mutable Mutex mu_;
  std::vector<bool> isolated_ GUARDED_BY(mu_);
  mutable std::vector<double> free_bytes_ GUARDED_BY(mu_);   // placement weights
  mutable uint64_t weights_read_ns_ GUARDED_BY(mu_) = 0;     // steady clock
};

}  // namespace gpucache
