#include "ctl/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <iostream>

namespace gpucache::ctl {

using nlohmann::json;

int Fail(const std::string& message) {
  std::cerr << "gpucachectl: " << message << "\n";
  return 2;
}

// Sends one request through <mount>/.gpucache/ctl; the reply, or nullopt with `error` set.
std::optional<json> Request(const std::string& mountpoint, const json& request, std::string& error) {
  std::string path = mountpoint + "/.gpucache/ctl";
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    error = path + ": " + std::strerror(errno) + " (is gpucachefs mounted there?)";
    return std::nullopt;
  }
  std::string body = request.dump();
  std::string reply;
  if (::write(fd, body.data(), body.size()) != static_cast<ssize_t>(body.size())) {
    error = path + ": write: " + std::strerror(errno);
  } else {
    char buf[8192];
    ssize_t n;
    while ((n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(reply.size()))) > 0) reply.append(buf, n);
  }
  ::close(fd);
  if (!error.empty()) return std::nullopt;
  json j = json::parse(reply, nullptr, false);
  if (j.is_discarded()) {
    error = "the daemon's reply is not JSON: " + reply.substr(0, 200);
    return std::nullopt;
  }
  return j;
}

// Sends a request and prints the reply: JSON as is, or `summary(reply)` for people.
int Send(const std::string& mountpoint, const json& request, bool as_json,
         const std::function<std::string(const json&)>& summary) {
  std::string error;
  auto reply = Request(mountpoint, request, error);
  if (!reply) return Fail(error);
  if (as_json) std::cout << reply->dump(2) << "\n";
  if (!reply->value("ok", false)) {
    if (!as_json) {
      std::cerr << "gpucachectl: " << reply->value("errno", "") << ": " << reply->value("error", "")
                << "\n";
    }
    return 2;
  }
  if (!as_json) std::cout << summary(*reply);
  return 0;
}

}  // namespace gpucache::ctl
