// CannedHttpServer: a scripted HTTP/1.1 server on 127.0.0.1 for S3Client unit tests.
// Each request (head and Content-Length body) is recorded and answered by the next scripted
// Step; with no step left it answers 500. Connections are kept alive unless a step closes
// them, and each connection is served by its own thread. The destructor stops everything.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpucache::cold::testing {

struct RecordedRequest {
  std::string method;
  std::string target;                          // path and query as sent
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
};

struct Step {
  enum Kind {
    kReply,     // send `raw`, keep the connection
    kTruncate,  // send `raw` (a reply cut short), then close
    kClose,     // close without replying
    kStall,     // never reply (until the client gives up or the server stops)
  };
  Kind kind = kReply;
  std::string raw;
};

inline std::string HttpReply(int status, const std::string& body,
                             const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" +
         body;
}

inline std::string S3ErrorReply(int status, const std::string& code, const std::string& message) {
  return HttpReply(status,
                   "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code +
                       "</Code><Message>" + message + "</Message></Error>",
                   "Content-Type: application/xml\r\n");
}

class CannedHttpServer {
 public:
  CannedHttpServer() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~CannedHttpServer() {
    stop_ = true;
    acceptor_.join();
    std::vector<std::thread> workers;
    {
      std::lock_guard lock(mu_);
      workers.swap(workers_);
    }
    for (auto& t : workers) t.join();
    ::close(listen_fd_);
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Push(Step step) {
    std::lock_guard lock(mu_);
    script_.push_back(std::move(step));
  }
  void Reply(std::string raw) { Push({Step::kReply, std::move(raw)}); }
  std::vector<RecordedRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int connections() const { return connections_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      ++connections_;
      std::lock_guard lock(mu_);
      workers_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  // Reads into `buffer` until `want` bytes are there; false on close or stop.
  bool ReadUntil(int fd, std::string& buffer, size_t want) {
    while (buffer.size() < want) {
      if (!Readable(fd)) return false;
      char chunk[65536];
      ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    return true;
  }
  bool Readable(int fd) {
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) return true;
    }
    return false;
  }

  void Serve(int fd) {
    std::string buffer;
    while (!stop_) {
      size_t end;
      while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
        if (!ReadUntil(fd, buffer, buffer.size() + 1)) return (void)::close(fd);
      }
      RecordedRequest request = ParseHead(buffer.substr(0, end));
      buffer.erase(0, end + 4);
      size_t length = 0;
      if (auto it = request.headers.find("content-length"); it != request.headers.end()) {
        length = std::stoul(it->second);
      }
      if (!ReadUntil(fd, buffer, length)) return (void)::close(fd);
      request.body = buffer.substr(0, length);
      buffer.erase(0, length);
      Step step{Step::kReply, HttpReply(500, "no scripted reply")};
      {
        std::lock_guard lock(mu_);
        requests_.push_back(request);
        if (!script_.empty()) {
          step = std::move(script_.front());
          script_.pop_front();
        }
      }
      if (step.kind == Step::kStall) {
        while (Readable(fd)) {
          char c;
          if (::recv(fd, &c, 1, 0) <= 0) break;
        }
        return (void)::close(fd);
      }
      if (step.kind != Step::kClose)
        (void)!::send(fd, step.raw.data(), step.raw.size(), MSG_NOSIGNAL);
      if (step.kind != Step::kReply) return (void)::close(fd);
    }
    ::close(fd);
  }

  static RecordedRequest ParseHead(const std::string& head) {
    RecordedRequest r;
    size_t line_end = head.find("\r\n");
    std::string first = head.substr(0, line_end);
    size_t sp1 = first.find(' '), sp2 = first.rfind(' ');
    r.method = first.substr(0, sp1);
    r.target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t next = head.find("\r\n", pos);
      if (next == std::string::npos) next = head.size();
      std::string line = head.substr(pos, next - pos);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        size_t v = line.find_first_not_of(' ', colon + 1);
        r.headers[name] = v == std::string::npos ? "" : line.substr(v);
      }
      pos = next + 2;
    }
    return r;
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::deque<Step> script_;                // GUARDED_BY(mu_)
  std::vector<RecordedRequest> requests_;  // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;       // GUARDED_BY(mu_)
};

}  // namespace gpucache::cold::testing
