// Serves the metrics over HTTP (GET /metrics) with GNU libmicrohttpd, for Prometheus.
//
// Meant for a loopback address (the default is 127.0.0.1:9110): the endpoint shows every
// tenant's counters and has no authentication of its own.
//
// Thread safety: Start/Stop from one thread; requests are served on libmicrohttpd's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

struct MHD_Daemon;

namespace gpucache {

class MetricsHttpServer {
 public:
  MetricsHttpServer() = default;
  ~MetricsHttpServer() { Stop(); }
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // `listen` is "IPv4:PORT". Returns false and says why in `error`.
  bool Start(const std::string& listen, std::function<std::string()> render, std::string* error);
  void Stop();

 private:
  MHD_Daemon* daemon_ = nullptr;
  std::function<std::string()> render_;
};

}  // namespace gpucache
