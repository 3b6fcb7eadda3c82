// A tmpfs of a given size mounted for the life of the object (tests run as root): a real
// device that fills up, or several devices of different sizes.
#pragma once

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <string>

namespace gpucache::test {

// A tmpfs of `size` mounted at `path` for the life of the object.
class Tmpfs {
 public:
  Tmpfs(std::string path, const std::string& size) : path_(std::move(path)) {
    ::mkdir(path_.c_str(), 0755);
    mounted_ =
        ::mount("tmpfs", path_.c_str(), "tmpfs", 0, ("size=" + size + ",mode=0755").c_str()) == 0;
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }
  uint64_t FreeBytes() const {
    struct statvfs s;
    return ::statvfs(path_.c_str(), &s) == 0 ? uint64_t(s.f_bavail) * s.f_frsize : 0;
  }

 private:
  std::string path_;
  bool mounted_ = false;
};

}  // namespace gpucache::test
