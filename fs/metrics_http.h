// Serves the metrics over HTTP with GNU libmicrohttpd, for Prometheus: GET /metrics (the text
// exposition 0.0.4, or OpenMetrics 1.0 when the Accept header asks for it) and GET /healthz
// (200 "ok" while the daemon serves).
//
// Meant for a loopback address (the default is 127.0.0.1:9110): the endpoint shows every
// tenant's counters. With a bearer token (`metrics.bearer_token_file`) /metrics answers only a
// request that carries it (401 otherwise; /healthz stays open); without one, any local user
// reads every tenant's counters. Any local user can connect, so the
// server must keep answering scrapes while others hold connections open: it polls with epoll,
// admits up to kMaxConnections at once, drops a connection idle for kIdleSeconds, and gives
// each one kConnectionMemory bytes (a scrape's request is a few hundred bytes).
//
// The socket is bound by Bind() before the daemon touches its data directories or forks (a
// taken port refuses the start and changes nothing); Start() serves it once the mount is up.
//
// Thread safety: Bind/Start/Stop from one thread; requests are served on libmicrohttpd's thread.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "fs/metrics.h"
#include "store/mutex.h"

struct MHD_Daemon;

namespace gpucache {

// Which exposition an Accept header asks for: OpenMetrics when it names
// application/openmetrics-text with a q at least that of text/plain (or */*), else the
// Prometheus text format. Null (no header): the text format.
MetricsFormat NegotiateMetricsFormat(const char* accept);

// Parses "IPv4:PORT" (PORT 1-65535). Returns false and says why in `error`.
bool ParseListenAddress(const std::string& listen, sockaddr_in* out, std::string* error);

// The token in `path` (a regular file of at most 4 KiB; surrounding whitespace dropped; printable
// ASCII without spaces, as an Authorization header carries it). nullopt and `error` says why.
std::optional<std::string> LoadMetricsToken(const std::string& path, std::string* error);

class MetricsHttpServer {
 public:
  static constexpr unsigned kMaxConnections = 1024;
  static constexpr unsigned kIdleSeconds = 2;
  static constexpr size_t kConnectionMemory = 16 * 1024;

  MetricsHttpServer() = default;
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds and listens on `listen` ("IPv4:PORT"). Returns false and says why in `error`.
  bool Bind(const std::string& listen, std::string* error);
  // Serves the bound socket; `token` empty: /metrics to anyone. REQUIRES: Bind() succeeded.
  bool Start(std::function<std::string()> render, std::string token, std::string* error);
  void Stop();

  // The token asked for from now on (a reload re-reads the file); empty: none.
  void SetToken(std::string token);

  // What the request handler reads (libmicrohttpd's thread).
  struct Served {
    std::function<std::string()> render;
    mutable Mutex mu;
    std::string token GUARDED_BY(mu);  // empty: none asked for
  };

 private:
  int listen_fd_ = -1;
  std::string listen_;
  MHD_Daemon* daemon_ = nullptr;
  Served served_;
};

}  // namespace gpucache
