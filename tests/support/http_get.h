// Loopback HTTP for the metrics tests: a free port to configure, and one GET with the whole
// response (status line, headers and body). Header-only: two test files use it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace gpucache::test {

// A loopback port nothing listens on right now (the kernel's pick for a bound, closed socket).
inline int FreeLoopbackPort() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// GET `path` from 127.0.0.1:`port` with an optional Accept header. The endpoint starts right
// after the mount is up, so the connection is retried for two seconds; a server that never
// answers fails the test after 10 s instead of hanging it. "" if nothing ever accepted.
// `headers`: more header lines, each ending in \r\n.
inline std::string HttpGet(int port, const std::string& path, const std::string& accept = "",
                           const std::string& headers = "") {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int s = -1;
  for (int i = 0; i < 100; ++i, ::usleep(20000)) {
    s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    ::close(s);
    s = -1;
  }
  if (s < 0) return "";
  timeval limit{10, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n" +
                    (accept.empty() ? "" : "Accept: " + accept + "\r\n") + headers + "\r\n";
  (void)::write(s, req.data(), req.size());
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = ::read(s, buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(s);
  return out;
}

}  // namespace gpucache::test
