#include "store/spare_pool.h"

#include "store/data_dir.h"

namespace gpucache {

SparePool::SparePool(Env& env, std::vector<std::string> dirs, size_t depth) : env_(env), depth_(depth) {
  for (std::string& d : dirs) devices_.push_back(Device{std::move(d), {}, false});
}

// The thread starts at the first use, not in the constructor: the daemon opens its store before
// it detaches, and a thread does not survive fork() (the child would wait for spares forever,
// and join a thread it does not have at exit).
void SparePool::StartOnce() {
  std::call_once(started_, [this] { thread_ = std::thread([this] { Run(); }); });
}

SparePool::~SparePool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Device& d : devices_) {
    for (SpareFile& f : d.ready) {
      f.fd.Reset();
      env_.Remove(f.path);
    }
  }
}

std::optional<SpareFile> SparePool::Take(size_t dev) {
  StartOnce();
  std::optional<SpareFile> out;
  {
    MutexLock lock(mu_);
    if (dev >= devices_.size()) return std::nullopt;
    Device& d = devices_[dev];
    if (!d.ready.empty()) {
      out = std::move(d.ready.back());
      d.ready.pop_back();
    }
    wanted_ = true;
  }
  wake_.notify_one();
  return out;
}

void SparePool::Retire(size_t dev) {
  std::vector<SpareFile> gone;
  {
    MutexLock lock(mu_);
    if (dev >= devices_.size()) return;
    devices_[dev].retired = true;
    gone.swap(devices_[dev].ready);
  }
  for (SpareFile& f : gone) {
    f.fd.Reset();
    env_.Remove(f.path);
  }
}

size_t SparePool::Ready(size_t dev) {
  StartOnce();
  MutexLock lock(mu_);
  return dev < devices_.size() ? devices_[dev].ready.size() : 0;
}

void SparePool::Run() {
  MutexLock lock(mu_);
  while (true) {
    while (!stop_ && !wanted_) wake_.wait(mu_);
    if (stop_) return;
    wanted_ = false;
    for (size_t dev = 0; dev < devices_.size() && !stop_; ++dev) {
      lock.Unlock();
      Fill(dev);
      lock.Lock();
    }
  }
}

void SparePool::Fill(size_t dev) {
  while (true) {
    std::string path;
    {
      MutexLock lock(mu_);
      Device& d = devices_[dev];
      if (stop_ || d.retired || d.ready.size() >= depth_) return;
      path = DataDir::In(d.dir, std::to_string(next_name_++));
    }
    // A full or failing device: stop here; the next Take tries again (no busy loop).
    int fd = env_.CreateExclusive(path);
    if (fd < 0) return;
    MutexLock lock(mu_);
    Device& d = devices_[dev];
    if (d.retired || stop_) {
      Fd{fd}.Reset();  // closed before its name goes
      env_.Remove(path);
      return;
    }
    d.ready.push_back(SpareFile{Fd(fd), std::move(path)});
  }
}

}  // namespace gpucache
