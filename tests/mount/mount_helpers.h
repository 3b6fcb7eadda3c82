// Small helpers shared by the mount tests.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "clients/cpp/mount_client.h"
#include "store/layout.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/sample_identity.h"

namespace gpucache::test {

inline std::string NsDir(const MountedFs& m, const CacheIdentity& id) {
  BlockAddress a = AddressOf(id);
  return m.mnt() + "/" + a.tenant + "/" + a.ns;
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One sample of the daemon's metrics (`series` with its labels, as written), or -1 if absent.
inline double Metric(const MountedFs& m, const std::string& series) {
  std::istringstream in(ReadText(m.mnt() + "/.gpucache/metrics"));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// Creates the .part, sets `identity_bytes` as the identity xattr, writes `payload`, closes.
// Returns the errno of the first failing step, or 0.
inline int WritePart(const std::string& part, const Bytes& identity_bytes, const Bytes& payload) {
  int fd = ::open(part.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return errno;
  int err = 0;
  if (::fsetxattr(fd, "user.gpucache.identity", identity_bytes.data(), identity_bytes.size(), 0) != 0) {
    err = errno;
  }
  if (!err && ::write(fd, payload.data(), payload.size()) != static_cast<ssize_t>(payload.size())) {
    err = errno;
  }
  ::close(fd);
  return err;
}

// Sends one request through .gpucache/ctl and returns the reply.
inline std::string Control(const MountedFs& m, const std::string& request) {
  int fd = ::open((m.mnt() + "/.gpucache/ctl").c_str(), O_RDWR);
  if (fd < 0) return "open failed";
  std::string reply;
  if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    // Plain read() after write(): the reply does not depend on the file offset.
    while ((n = ::read(fd, buf, sizeof buf)) > 0) reply.append(buf, n);
  }
  ::close(fd);
  return reply;
}

}  // namespace gpucache::test
