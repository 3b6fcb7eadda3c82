#include "ctl/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "ctl/discover.h"

namespace gpucache::ctl {

using nlohmann::json;

namespace {
bool json_output = false;

// ENOTCONN: the mount is still there but its FUSE connection is not (the daemon died).
std::string StaleMount(const std::string& mountpoint) {
  return mountpoint + ": stale mount (the daemon that served it is gone); run `fusermount3 -u -z " +
         mountpoint + "` before starting gpucachefs there again";
}
}  // namespace

void SetJsonOutput(bool on) { json_output = on; }
bool JsonOutput() { return json_output; }

int Fail(const std::string& message, int exit_code, int err) {
  if (!json_output) {
    std::cerr << "gpucachectl: " << message << "\n";
    return exit_code;
  }
  json j{{"ok", false}};
  const char* name = err ? strerrorname_np(err) : nullptr;
  if (name) j["errno"] = name;
  j["error"] = message;
  j["exit_code"] = exit_code;
  std::cout << j.dump(2) << "\n";
  return exit_code;
}

int Refused(const json& reply) {
  // A refusal names its errno and why (docs/control-protocol.md); anything else is no reply of a
  // gpucachefs this tool knows (found by review: "gpucachectl: : ").
  if (!reply.is_object() || !reply.contains("error") || !reply["error"].is_string()) {
    return Fail("the reply is not one of a gpucachefs this gpucachectl understands: " +
                    reply.dump(-1, ' ', false, json::error_handler_t::replace),
                2);
  }
  if (json_output) {
    json j = reply;
    j["exit_code"] = 2;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cerr << "gpucachectl: " << reply.value("errno", "") << ": " << reply.value("error", "")
              << "\n";
  }
  return 2;
}

std::string ResolveMount(const std::string& given) {
  auto where = FindGpucacheMount(given);
  if (!where || where->inside.empty()) return given;  // the spelling the operator used
  return where->mountpoint;
}

namespace {
constexpr long kFuseSuperMagic = 0x65735546;  // linux/magic.h FUSE_SUPER_MAGIC

std::string NotOurs(const std::string& mountpoint) {
  return mountpoint + ": not a gpucachefs mount (no fuse.gpucachefs mount holds it in "
         "/proc/self/mountinfo): nothing sent";
}
}  // namespace

// Sends one request through <mount>/.gpucache/ctl; the reply, or nullopt with `error` set.
// Only into a gpucachefs mount's own control file: root running this against a directory
// someone else controls (a mountpoint whose daemon stopped) would otherwise write the request
// into whatever file .gpucache/ctl names there, through a symlink too (found by review).
std::optional<json> Request(const std::string& mountpoint, const json& request, std::string& error,
                            int* err) {
  std::optional<MountedPath> mount = FindGpucacheMount(mountpoint);
  if (!mount) {
    struct stat st {};
    // A stale mount reached through a link cannot be resolved to the mount table's path.
    bool stale = ::stat(mountpoint.c_str(), &st) != 0 && errno == ENOTCONN;
    if (err) *err = stale ? ENOTCONN : ENODEV;
    error = stale ? StaleMount(mountpoint) : NotOurs(mountpoint);
    return std::nullopt;
  }
  std::string path = mountpoint + "/.gpucache/ctl";
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    int e = errno;
    if (err) *err = e == ELOOP ? ENODEV : e;
    error = e == ENOTCONN ? StaleMount(mountpoint)
            : e == ELOOP  ? NotOurs(mountpoint)  // a link in place of the control file
                          : path + ": " + std::strerror(e) + " (is gpucachefs mounted there?)";
    return std::nullopt;
  }
  // The file opened is in the gpucachefs mount found (the mount table was read before the
  // open: a path swapped in between, to another FUSE filesystem too, is caught here).
  struct statfs sfs {};
  struct stat st {};
  const std::string dev = ::fstat(fd, &st) == 0
                              ? std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev))
                              : "";
  if (::fstatfs(fd, &sfs) != 0 || sfs.f_type != kFuseSuperMagic || dev != mount->majmin) {
    ::close(fd);
    if (err) *err = ENODEV;
    error = NotOurs(mountpoint);
    return std::nullopt;
  }
  std::string body = request.dump();
  std::string reply;
  if (::write(fd, body.data(), body.size()) != static_cast<ssize_t>(body.size())) {
    int e = errno;
    if (err) *err = e;
    error = e == ENOTCONN ? StaleMount(mountpoint) : path + ": write: " + std::strerror(e);
  } else {
    char buf[8192];
    ssize_t n;
    while ((n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(reply.size()))) > 0) reply.append(buf, n);
  }
  ::close(fd);
  if (!error.empty()) return std::nullopt;
  json j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error = "the daemon's reply is not a JSON object: " + reply.substr(0, 200);
    return std::nullopt;
  }
  return j;
}

// Sends a request and prints the reply: JSON as is, or `summary(reply)` for people.
int Send(const std::string& mountpoint, const json& request, bool as_json,
         const std::function<std::string(const json&)>& summary) {
  std::string error;
  int err = 0;
  auto reply = Request(mountpoint, request, error, &err);
  if (!reply) return Fail(error, 2, err);
  if (!reply->value("ok", false)) return Refused(*reply);
  std::cout << (as_json ? reply->dump(2) + "\n" : summary(*reply));
  return 0;
}

}  // namespace gpucache::ctl
